"""tools/report.py: the steady-state figure is a median (one slow step does not move it), and an S3 run whose
files are not there is told as missing, whichever code S3 answers."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tools.report import ReportError, load_run, text_summary
from tests.infra.test_report import records


def test_throughput_is_the_median_of_the_steps_after_the_first():
    rows = records(steps=5, with_validation=False)
    for row, speed in zip(rows, (50.0, 1000.0, 1000.0, 1000.0, 100.0)):  # the first is start-up; one slow step
        row["tokens_per_s_per_gpu"] = speed
    # The median of 1000, 1000, 1000, 100 is 1000 (the mean would be 775).
    assert text_summary(rows, None)[1].startswith("throughput (median): 1,000 tokens/s per GPU")


@pytest.mark.parametrize("code", ["NoSuchKey", "404"])
def test_an_s3_run_without_metrics_is_refused_as_missing(monkeypatch, code):
    # GetObject answers NoSuchKey for a missing key; a bare 404 is what botocore gives for a response without an error
    # body (a HEAD, some S3-compatible stores).
    import boto3

    class S3:
        def get_object(self, Bucket, Key):
            raise ClientError({"Error": {"Code": code, "Message": "missing"}}, "GetObject")

    monkeypatch.setattr(boto3, "client", lambda service: S3())
    with pytest.raises(ReportError, match=r"^RUN: s3://bucket/runs/r1 has no metrics.jsonl"):
        load_run("s3://bucket/runs/r1")


def test_peak_memory_is_the_highest_of_any_step_not_the_last():
    rows = records(steps=5, with_validation=False)
    for row, gib in zip(rows, (10.0, 14.0, 12.0, 11.0, 11.0)):
        row["peak_mem_gib"] = gib
    assert "peak GPU memory: 14.0 GiB" in text_summary(rows, None)


def test_a_bill_without_an_error_figure_prints_the_measured_dollars_alone():
    # tools/bill.py summary: the error is None when nothing was measured (no GPU node seen), though the synth estimated.
    from tools.report import resilience_lines

    lines = resilience_lines({"bill": {"measured_usd": 0.0, "estimate_usd": 1.2, "error": None}})
    assert lines == ["GPU nodes billed: $0.00 measured"]


@pytest.mark.parametrize("run", ["s3://bucket/runs/r1", "s3://bucket/runs/r1/"])
def test_an_s3_runs_png_is_named_after_the_run_with_or_without_a_trailing_slash(run):
    from pathlib import Path

    from tools.report import default_output

    assert default_output(run) == Path("reports") / "r1.png"
