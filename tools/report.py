"""Pictures of a run: `python -m tools.report RUN [--out FILE]` (make report RUN=...).

RUN is a run folder: local, or s3://bucket/runs/<name> (read with your AWS credentials). Reads the
trainer's metrics.jsonl (one record per logged step) and run_summary.json when there is one, prints
a short text summary and renders a PNG: training and validation loss, tokens/s per GPU, MFU and
peak memory against the step. The PNG goes beside the metrics for a local run, and to
reports/<name>.png for one in S3.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from tools.cli import OneLineParser
from training.records import METRICS_FILE, read_metrics

SUMMARY_FILE = "run_summary.json"


class ReportError(RuntimeError):
    """The run cannot be reported on; one line."""


def _read(run: str, name: str) -> str | None:
    """A file of the run, or None when it is not there."""
    if not run.startswith("s3://"):
        path = Path(run).expanduser() / name
        return path.read_text() if path.is_file() else None
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, prefix = run.removeprefix("s3://").partition("/")
    try:
        return boto3.client("s3").get_object(Bucket=bucket, Key=f"{prefix.rstrip('/')}/{name}")["Body"].read().decode()
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise ReportError(f"cannot read {run}/{name}: {str(error).splitlines()[0]}") from None
    except BotoCoreError as error:
        raise ReportError(f"cannot read {run}/{name}: {error}") from None


def load_run(run: str) -> tuple[list[dict], dict | None]:
    text = _read(run, METRICS_FILE)
    if text is None:
        raise ReportError(f"RUN: {run} has no {METRICS_FILE} (a run folder: local, or s3://bucket/runs/<name>)")
    records = read_metrics(text)
    if not records:
        raise ReportError(f"RUN: {run}/{METRICS_FILE} holds no step records yet")
    summary = _read(run, SUMMARY_FILE)
    return records, json.loads(summary) if summary else None


def text_summary(records: list[dict], summary: dict | None) -> list[str]:
    """A few lines: where the loss went, validation, steady-state speed, memory."""
    first, last = records[0], records[-1]
    lines = [f"steps: {last['step']} of {last['steps']}, training loss {first['loss']:.4f} -> {last['loss']:.4f}"]
    evaluated = [r for r in records if r.get("val_loss") is not None]
    if evaluated:
        best = min(evaluated, key=lambda r: r["val_loss"])
        lines.append(f"validation loss {evaluated[0]['val_loss']:.4f} (step {evaluated[0]['step']}) -> "
                     f"{evaluated[-1]['val_loss']:.4f} (step {evaluated[-1]['step']}), perplexity "
                     f"{evaluated[-1]['val_ppl']:,.2f}; best {best['val_loss']:.4f} at step {best['step']}")
    steady = records[1:] or records  # the first logged step carries start-up and compilation
    speed = statistics.median(r["tokens_per_s_per_gpu"] for r in steady)
    mfus = [r["mfu"] for r in steady if r.get("mfu") is not None]
    mfu = f", MFU {statistics.median(mfus) * 100:.1f}%" if mfus else ""
    lines.append(f"throughput (median): {speed:,.0f} tokens/s per GPU{mfu}, "
                 f"{statistics.median(r['step_time_s'] for r in steady) * 1000:,.0f} ms/step")
    memory = max(r.get("peak_mem_gib", 0.0) for r in records)
    if memory:
        lines.append(f"peak GPU memory: {memory:.1f} GiB")
    if summary:
        stalls = summary.get("checkpoint_stalls_s") or []
        if stalls:
            lines.append(f"checkpoint pauses: {len(stalls)}, longest {max(stalls):.2f} s")
        lines.append(f"wall time: {summary.get('wall_time_s')} s, transport: {summary.get('transport')}")
        lines += resilience_lines(summary)
    return lines


def resilience_lines(summary: dict) -> list[str]:
    """The health gate's measured links beside the planner's figure, and the measured bill beside the estimate."""
    lines = []
    health = summary.get("health") or {}
    planned = health.get("predicted_link_gbps")
    for link in health.get("links") or []:
        lines.append(f"link {' <-> '.join(link['nodes'])}: all-reduce {link['all_reduce_gbps']:g} GB/s, all-gather "
                     f"{link['all_gather_gbps']:g} GB/s (planned {f'{planned:g} GB/s' if planned else 'not given'}; "
                     f"health gate {health.get('gate_s')} s)")
    bill = summary.get("bill") or {}
    if bill.get("measured_usd") is not None:
        estimate = (f", estimated ${bill['estimate_usd']:.2f} ({bill['error']:+.1%} of measured)"
                    if bill.get("estimate_usd") and bill.get("error") is not None else "")
        lines.append(f"GPU nodes billed: ${bill['measured_usd']:.2f} measured{estimate}")
    return lines


def render_png(records: list[dict], path: Path, title: str) -> Path:
    """Four panels against the step: losses, tokens/s per GPU, MFU, peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    loss_axis, speed_axis, mfu_axis, memory_axis = axes.flat
    loss_axis.plot(steps, [r["loss"] for r in records], label="training")
    evaluated = [r for r in records if r.get("val_loss") is not None]
    if evaluated:
        loss_axis.plot([r["step"] for r in evaluated], [r["val_loss"] for r in evaluated], "o-", label="validation")
    loss_axis.set(title="loss (nats per target token)", ylabel="loss")
    loss_axis.legend()
    speed_axis.plot(steps, [r["tokens_per_s_per_gpu"] for r in records])
    speed_axis.set(title="throughput", ylabel="tokens/s per GPU")
    _plot_or_note(mfu_axis, [(r["step"], r["mfu"] * 100) for r in records if r.get("mfu") is not None],
                  "no MFU (CPU run, or a GPU without a known bf16 peak)")
    mfu_axis.set(title="model FLOPs utilisation", ylabel="MFU (%)", xlabel="step")
    _plot_or_note(memory_axis, [(r["step"], r["peak_mem_gib"]) for r in records if r.get("peak_mem_gib")],
                  "no GPU memory (CPU run)")
    memory_axis.set(title="peak GPU memory", ylabel="GiB", xlabel="step")
    for axis in axes.flat:
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _plot_or_note(axis, points: list[tuple[int, float]], note: str) -> None:
    if points:
        axis.plot(*zip(*points))
    else:
        axis.text(0.5, 0.5, note, ha="center", va="center", transform=axis.transAxes)


def run_name(run: str) -> str:
    return run.rstrip("/").rsplit("/", 1)[-1]


def default_output(run: str) -> Path:
    return Path("reports") / f"{run_name(run)}.png" if run.startswith("s3://") else Path(run).expanduser() / "report.png"


def report(run: str, out: Path | None = None) -> list[str]:
    """Render the run's PNG and return the text summary, ending with where the PNG is."""
    records, summary = load_run(run)
    path = render_png(records, out or default_output(run), run_name(run))
    return text_summary(records, summary) + [f"report: {path}"]


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m tools.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="run folder: local path or s3://bucket/runs/<name>")
    parser.add_argument("--out", type=Path, default=None, help="PNG to write (default: beside a local run, reports/ for S3)")
    try:
        args = parser.parse_args(argv)
        print("\n".join(report(args.run, args.out)))
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
