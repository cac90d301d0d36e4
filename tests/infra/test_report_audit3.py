"""tools/report.py's edges no other test of the module ran: S3 unreachable (a one-line ReportError naming the file)
and a panel without points (its note instead of an empty plot)."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError

from tools import report


def test_an_unreachable_s3_is_a_one_line_error_naming_the_file(monkeypatch):
    class S3:
        def get_object(self, Bucket, Key):
            assert (Bucket, Key) == ("bucket", "runs/ft-1/metrics.jsonl")
            raise EndpointConnectionError(endpoint_url="https://s3.us-east-2.amazonaws.com")

    monkeypatch.setattr(boto3, "client", lambda service: S3())
    with pytest.raises(report.ReportError, match=r"^cannot read s3://bucket/runs/ft-1//?metrics\.jsonl: Could not "
                                                 r"connect to the endpoint URL"):
        report._read("s3://bucket/runs/ft-1/", report.METRICS_FILE)


class _Axis:
    transAxes = "axes"

    def __init__(self):
        self.calls = []

    def plot(self, *args):
        self.calls.append(("plot", args))

    def text(self, x, y, note, **kw):
        self.calls.append(("text", note, kw["transform"]))


def test_a_panel_without_points_shows_its_note_and_one_with_points_plots_them():
    empty, full = _Axis(), _Axis()
    report._plot_or_note(empty, [], "no MFU (CPU run, or a GPU without a known bf16 peak)")
    report._plot_or_note(full, [(1, 40.0), (2, 42.5)], "unused")
    assert empty.calls == [("text", "no MFU (CPU run, or a GPU without a known bf16 peak)", "axes")]
    assert full.calls == [("plot", ((1, 2), (40.0, 42.5)))]
