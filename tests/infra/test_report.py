"""make report: a run's metrics.jsonl (local or S3) to a PNG and a text summary."""

from __future__ import annotations

import json
import math

import pytest

from tools.report import ReportError, load_run, main, render_png, report, resilience_lines, text_summary
from tests.conftest import fake_aws_credentials


def records(steps: int = 20, with_validation: bool = True) -> list[dict]:
    out = []
    for step in range(1, steps + 1):
        r = {"time": "2026-11-30T00:00:00Z", "step": step, "steps": steps, "loss": 5.0 / step, "lr": 1e-3,
             "grad_norm": 1.0, "tokens_per_s_per_gpu": 1000.0 + step, "tflops_per_gpu": 1.0, "mfu": 0.40,
             "peak_mem_gib": 10.0 + step / 10, "step_time_s": 0.5, "eta_s": 1.0}
        if with_validation and step % 10 == 0:
            r |= {"val_loss": 6.0 / step, "val_ppl": math.exp(6.0 / step)}
        out.append(r)
    return out


def write_run(folder, rows, summary=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if summary:
        (folder / "run_summary.json").write_text(json.dumps(summary))
    return str(folder)


def test_text_summary_names_the_losses_speed_and_memory():
    lines = text_summary(records(), {"checkpoint_stalls_s": [0.4, 0.3], "wall_time_s": 12.0, "transport": "efa"})
    assert lines[0] == "steps: 20 of 20, training loss 5.0000 -> 0.2500"
    assert lines[1] == "validation loss 0.6000 (step 10) -> 0.3000 (step 20), perplexity 1.35; best 0.3000 at step 20"
    assert lines[2] == "throughput (median): 1,011 tokens/s per GPU, MFU 40.0%, 500 ms/step"
    assert lines[3] == "peak GPU memory: 12.0 GiB"
    assert lines[4] == "checkpoint pauses: 2, longest 0.40 s"


def test_the_png_is_rendered(tmp_path):
    path = render_png(records(), tmp_path / "r.png", "a run")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1210, 770)  # 11 x 7 inches at 110 dpi


def test_a_local_run_gets_its_png_beside_the_metrics(tmp_path, capsys):
    run = write_run(tmp_path / "run-a", records(with_validation=False))
    assert main([run]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "run-a" / "report.png").is_file()
    assert out.splitlines()[-1] == f"report: {tmp_path / 'run-a' / 'report.png'}"
    assert "validation" not in out


def test_a_run_without_metrics_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: RUN: {tmp_path / 'nothing'} has no metrics.jsonl "
                                               "(a run folder: local, or s3://bucket/runs/<name>)")


def test_an_empty_metrics_file_is_refused(tmp_path):
    with pytest.raises(ReportError, match=r"metrics.jsonl holds no step records yet"):
        load_run(write_run(tmp_path / "empty", []))


def test_a_run_in_s3_is_read_with_the_callers_credentials(tmp_path, monkeypatch):
    import boto3
    from moto import mock_aws

    fake_aws_credentials(monkeypatch)
    monkeypatch.chdir(tmp_path)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="ckpt")
        s3.put_object(Bucket="ckpt", Key="runs/ft-1/metrics.jsonl", Body="".join(json.dumps(r) + "\n" for r in records()))
        lines = report("s3://ckpt/runs/ft-1")
        assert lines[-1] == "report: reports/ft-1.png" and (tmp_path / "reports" / "ft-1.png").is_file()
        with pytest.raises(ReportError, match=r"cannot read s3://nope/runs/x/metrics.jsonl: .*NoSuchBucket"):
            load_run("s3://nope/runs/x")


def test_the_report_puts_the_measured_link_beside_the_plan_and_the_bill_beside_the_estimate():
    summary = {"health": {"gate_s": 4.2, "predicted_link_gbps": 5.0, "links": [
        {"nodes": ["ip-1", "ip-2"], "message_bytes": 93_585_408, "all_reduce_gbps": 4.1, "all_gather_gbps": 3.9}]},
        "bill": {"measured_usd": 3.40646, "estimate_usd": 3.28, "error": -0.0371}}
    assert resilience_lines(summary) == [
        "link ip-1 <-> ip-2: all-reduce 4.1 GB/s, all-gather 3.9 GB/s (planned 5 GB/s; health gate 4.2 s)",
        "GPU nodes billed: $3.41 measured, estimated $3.28 (-3.7% of measured)"]
