"""The benchmark's report: the table of cases, comparisons with each group's baseline, rounds, and the planner's
step time beside each emulated-link case.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from benchmarks.suites import BENCH_MODEL, MFU_ENV_GROUPS, ROUND, Group
from benchmarks.worker import FP8_CUBE
from training.gpus import gpu_for_device_name
from training.metrics import rates


def summarize(result: dict, measured_peak: float | None, datasheet_peak: float | None) -> dict:
    """Derived figures of one case: tokens/s, TFLOP/s and MFU per GPU."""
    if "error" in result:
        return {**result, "tokens_per_s_per_gpu": None}
    timing = (result["tokens_per_step_per_gpu"], result["step_time_s"], result["flops_per_token"])
    tps, tflops, mfu_measured = rates(*timing, measured_peak)
    return {**result, "tokens_per_s_per_gpu": tps, "tflops_per_gpu": tflops,
            "mfu_measured": mfu_measured, "mfu_datasheet": rates(*timing, datasheet_peak)[2]}


def format_table(rows: list[dict]) -> str:
    """Markdown table of summarized cases, in run order."""
    header = ("| configuration | GPUs | batch x seq | tokens/s/GPU | TFLOP/s/GPU | MFU (measured peak) "
              "| MFU (datasheet) | peak GiB | step ms |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    lines = [header]
    for r in rows:
        accum = r["settings"].get("grad_accum", 1)
        shape = f"{r['settings']['micro_batch']} x {r['settings']['seq_len']}" + (f" x {accum} accum" if accum > 1 else "")
        if r.get("tokens_per_s_per_gpu") is None:
            lines.append(f"| {r['name']} | {r['world_size']} | {shape} | {r.get('error', 'failed')} | | | | "
                         f"{r.get('peak_mem_gib', 0):.1f} | |")
            continue
        pct = lambda v: f"{v * 100:.1f}%" if v is not None else "n/a"  # noqa: E731
        lines.append(
            f"| {r['name']} | {r['world_size']} | {shape} | {r['tokens_per_s_per_gpu']:,.0f} | {r['tflops_per_gpu']:.1f} "
            f"| {pct(r['mfu_measured'])} | {pct(r['mfu_datasheet'])} | {r['peak_mem_gib']:.1f} | {r['step_time_s'] * 1000:.0f} |")
    return "\n".join(lines)


def comparisons(rows: list[dict]) -> list[str]:
    """Side-by-side ratios: ours over the example's recipe, normal NCCL over sockets, scaling from one GPU."""
    by_name = {r["name"]: r for r in rows if r.get("tokens_per_s_per_gpu")}
    default = next((r for r in rows if r["group"] == "main" and r["recipe"] == "trainer"), None)
    out = []
    if not default or not default.get("tokens_per_s_per_gpu"):
        return out
    base = default["tokens_per_s_per_gpu"]
    for r in rows:
        if r["recipe"] == "example" and r.get("tokens_per_s_per_gpu"):
            out.append(f"trainer default / {r['name']}: {base / r['tokens_per_s_per_gpu']:.1f}x tokens/s per GPU")
        if r["recipe"] == "liger" and r.get("tokens_per_s_per_gpu"):
            out.append(f"trainer default / {r['name']}: {base / r['tokens_per_s_per_gpu']:.3f}x tokens/s per GPU")
    out += lever_lines(default, rows)
    for r in by_name.values():
        if r["group"] == "sockets":
            out.append(f"normal NCCL path / sockets only: {base / r['tokens_per_s_per_gpu']:.2f}x tokens/s per GPU")
        if r["group"] == "world1":
            out.append(f"scaling 1 -> {default['world_size']} GPUs: {base / r['tokens_per_s_per_gpu'] * 100:.1f}% of one GPU's tokens/s per GPU")
    return out


def lever_lines(default: dict, rows: list[dict]) -> list[str]:
    """Each lever case (--suite mfu) against the default: its tokens/s ratio and how far its losses
    strayed from the default's, step by step (same seed and data: a lever must not change the loss)."""
    # A group's own baseline (same process): its first trainer case without levers; the main group's default for
    # a group of process settings (its one case is the lever) or of another recipe.
    defaults: dict[str, dict] = {}
    for r in rows:
        if (r["recipe"] == "trainer" and not r.get("levers") and r.get("tokens_per_s_per_gpu")
                and r["group"] not in MFU_ENV_GROUPS):
            defaults.setdefault(r["group"], r)
    out = []
    for r in rows:
        base = defaults.get(r["group"], default)
        if r is base or r["recipe"] != "trainer" or not r.get("tokens_per_s_per_gpu") or not (
                r.get("levers") or r["settings"] != base["settings"] or r["group"] in MFU_ENV_GROUPS):
            continue
        gap = max((abs(a - b) for a, b in zip(base.get("losses", []), r.get("losses", []))), default=float("nan"))
        out.append(f"{r['name']}: {r['tokens_per_s_per_gpu'] / base['tokens_per_s_per_gpu']:.3f}x the default's "
                   f"tokens/s ({base['group']} group), largest loss gap {gap:.4f}, attention "
                   f"{r.get('attention_backend', 'n/a')}")
    return out


def round_lines(rows: list[dict]) -> list[str]:
    """Per case run in rounds: the median of its rounds' tokens/s, their range, and that median over the median of
    its group's first case (the group's baseline, as in lever_lines)."""
    rounds: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if ROUND in r["name"] and r.get("tokens_per_s_per_gpu"):
            rounds.setdefault((r["group"], r["name"].rsplit(ROUND, 1)[0]), []).append(r["tokens_per_s_per_gpu"])
    baselines: dict[str, float] = {}
    for (group, _), rates in rounds.items():
        baselines.setdefault(group, statistics.median(rates))
    return [f"{name}: median {statistics.median(rates):,.0f} tokens/s/GPU over {len(rates)} rounds "
            f"({min(rates):,.0f}-{max(rates):,.0f}), {statistics.median(rates) / baselines[group]:.3f}x the group's first case"
            for (group, name), rates in rounds.items() if len(rates) > 1]


def fp8_lines(rows: list[dict], matmul: dict | None, device: str) -> list[str]:
    """Each timed case's TFLOP/s against the FP8 peak, measured (the e4m3 8192-cube) and datasheet, and each fp8
    case's speed over the bf16 default and over the best bf16 peer (--suite fp8)."""
    fp8_cases = [r for r in rows if r["settings"].get("precision") == "fp8" or r["recipe"] == "fp8-peer"]
    if not fp8_cases:
        return []
    cube = [rates[FP8_CUBE] for rates in (matmul or {}).get("per_rank", []) if FP8_CUBE in rates]
    measured = statistics.median(cube) if cube else None
    gpu = gpu_for_device_name(device) if device else None
    datasheet = gpu.fp8_tflops if gpu and gpu.fp8_tflops else None
    timed = [r for r in rows if r.get("tflops_per_gpu")]
    lines = [f"MFU against the FP8 peak (measured {measured or 0:.0f}, datasheet {datasheet or 0:.0f} TFLOP/s): " + ", ".join(
        f"{r['name']} {r['tflops_per_gpu'] / measured:.1%} / {r['tflops_per_gpu'] / datasheet:.1%}" if measured and datasheet
        else f"{r['name']} n/a" for r in timed)]
    default = next((r for r in timed if r["recipe"] == "trainer" and r["settings"].get("precision", "bf16") == "bf16"
                    and not r.get("levers")), None)
    peers = [r for r in timed if r["recipe"] in ("liger", "example")]
    best_peer = max(peers, key=lambda r: r["tokens_per_s_per_gpu"], default=None)
    for r in (r for r in fp8_cases if r.get("tokens_per_s_per_gpu")):
        parts = []
        if default:
            parts.append(f"{r['tokens_per_s_per_gpu'] / default['tokens_per_s_per_gpu']:.3f}x the bf16 default")
        if best_peer:
            parts.append(f"{r['tokens_per_s_per_gpu'] / best_peer['tokens_per_s_per_gpu']:.3f}x the best bf16 peer "
                         f"({best_peer['name']})")
        if parts:
            lines.append(f"{r['name']}: " + ", ".join(parts))
    return lines


PARITY_FINAL_TOLERANCE = 0.005
PARITY_STEP_TOLERANCE = 0.02


def measured_peak_tflops(out: Path) -> tuple[float | None, dict | None]:
    path = out / "results" / "matmul.json"
    if not path.is_file():
        return None, None
    data = json.loads(path.read_text())
    cube = [rates["8192x8192x8192"] for rates in data["per_rank"]]
    return statistics.median(cube), data


# Sockets groups and the NVLink group (and name suffix) of the same cases, which gives their compute time.
EMULATION_PAIRS = {"layouts-sockets": ("layouts-nvlink", ""), "accumulation-sockets": ("accumulation-nvlink", ", NVLink")}


def emulation_rows(rows: list[dict], links: dict[str, dict], model_name: str) -> list[dict]:
    """planning.plan's step time for each emulated-link case next to the measured one, twice.

    The link is the same run's all-gather bus bandwidth at one decoder layer's size (in the case's NCCL
    environment). "predicted" takes the compute time from the planner's own calibration: the whole model
    under test. "predicted, run's compute" takes it from the same case over NVLink in this run, where
    communication is small: what it then tests is the traffic and overlap arithmetic alone.
    """
    from training.gpus import GPUS
    from planning.calibration import CALIBRATION
    from planning.timing import estimate
    from planning.workload import MODELS, Cluster, Layout, Workload

    ok = {(r["group"], r["name"]): r for r in rows if "error" not in r}
    out = []
    for r in rows:
        nvlink_group, suffix = next(((nv, sfx) for sockets, (nv, sfx) in EMULATION_PAIRS.items()
                                     if r.get("group") in (sockets, nv)), (None, ""))
        link = links.get(r.get("group"), {}).get("all_gather layer")
        if nvlink_group is None or "error" in r or not link:
            continue
        base = ok.get((nvlink_group, r["name"].removesuffix(", sockets").removesuffix(suffix) + suffix))
        if not base:
            continue
        st = r["settings"]
        work = Workload(seq_len=st["seq_len"], micro_batch=st["micro_batch"], grad_accum=st["grad_accum"],
                        activation_checkpointing=st["activation_checkpointing"], loss_chunk_tokens=st["loss_chunk_tokens"])
        gpu = GPUS["H200"]
        efficiency = base["tokens_per_s_per_gpu"] * base["flops_per_token"] / (CALIBRATION.matmul_peak(gpu) * 1e12)
        key = (work.activation_checkpointing == "full", work.seq_len * work.micro_batch)  # the calibration's keys
        cluster = Cluster(gpu=gpu, nodes=2, gpus_per_node=1, inter_node_gbps=link["busbw_gbps"], name="2 x (1 H200)")
        layout = Layout(st["sharding"], not st["reshard_after_forward"], st["reduce_dtype"])
        standing = dataclasses.replace(CALIBRATION, link_efficiency=1.0)
        own = dataclasses.replace(standing, efficiency={key: efficiency}, one_gpu={})  # this run's compute only
        predicted = estimate(MODELS[model_name], work, cluster, layout, standing)
        own_compute = estimate(MODELS[model_name], work, cluster, layout, own)
        out.append({"name": r["name"], "group": r["group"], "measured_step_s": r["step_time_s"],
                    "predicted_step_s": predicted.step_s, "error": predicted.step_s / r["step_time_s"] - 1,
                    "predicted_run_compute_step_s": own_compute.step_s,
                    "error_run_compute": own_compute.step_s / r["step_time_s"] - 1,
                    "link_busbw_gbps": link["busbw_gbps"], "bound": predicted.bound,
                    "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"]})
    return out


def reduce_dtype_comparison(rows: list[dict]) -> str | None:
    """How bf16 gradient reduction moves the loss curve against fp32, same seed, data and steps."""
    curves = {r["settings"]["reduce_dtype"]: r.get("losses") for r in rows
              if r.get("group") == "reduce-dtype-loss" and "error" not in r and r.get("losses")}
    if set(curves) != {"fp32", "bf16"}:
        return None
    fp32, bf16 = curves["fp32"], curves["bf16"]
    gaps = [abs(a - b) for a, b in zip(fp32, bf16)]
    tail = len(fp32) // 4
    mean_tail = lambda xs: sum(xs[-tail:]) / tail  # noqa: E731
    return (f"bf16 against fp32 gradient reduction over {len(fp32)} steps (pattern data): loss {fp32[0]:.4f} -> "
            f"{fp32[-1]:.4f} (fp32) and {bf16[0]:.4f} -> {bf16[-1]:.4f} (bf16); largest gap {max(gaps):.4f}, "
            f"mean of the last {tail} steps {mean_tail(fp32):.4f} vs {mean_tail(bf16):.4f}")


def accumulation_comparison(rows: list[dict], out: Path) -> list[str]:
    """Per grad_accum, each accumulation variant's loss over the last quarter of its steps and its final
    validation loss; the curves in OUT/accumulation.png."""
    runs = [r for r in rows if r.get("group") == "accumulation-loss" and "error" not in r and r.get("losses")]
    lines = []
    for r in runs:
        tail = len(r["losses"]) // 4
        lines.append(f"{r['name']}: loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, mean of the last {tail} "
                     f"steps {sum(r['losses'][-tail:]) / tail:.4f}, validation loss {r.get('val_loss', float('nan')):.4f}")
    if runs:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        accums = sorted({r["settings"]["grad_accum"] for r in runs})
        fig, axes = plt.subplots(1, len(accums), figsize=(6 * len(accums), 4), squeeze=False)
        for ax, accum in zip(axes[0], accums):
            for r in runs:
                if r["settings"]["grad_accum"] == accum:
                    ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=r["name"].split(", grad_accum")[0], lw=1)
            ax.set(title=f"grad_accum {accum}: Qwen2.5-1.5B shape, pattern data", xlabel="step", ylabel="loss", yscale="log")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "accumulation.png", dpi=110)
    return lines


def format_emulation(rows: list[dict]) -> str:
    lines = ["| case | link GB/s (busbw) | measured s/step | model s/step | error | model, run's compute | error | "
             "model says | tokens/s/GPU |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['link_busbw_gbps']:.1f} | {r['measured_step_s']:.3f} | {r['predicted_step_s']:.3f} | "
                     f"{r['error']:+.0%} | {r['predicted_run_compute_step_s']:.3f} | {r['error_run_compute']:+.0%} | "
                     f"{r['bound']} | {r['tokens_per_s_per_gpu']:,.0f} |")
    return "\n".join(lines)


def report(out: Path, groups: list[Group], gpus: int) -> str:
    from training.metrics import datasheet_peak_tflops
    from training.transport import judge_files

    measured, matmul = measured_peak_tflops(out)
    links = {p.stem.removeprefix("links-"): json.loads(p.read_text()) for p in (out / "results").glob("links-*.json")}
    raw = [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))
           if p.name != "matmul.json" and not p.name.startswith("links-")]
    order = {key: n for n, key in enumerate((g.name, c.name) for g in groups for c in g.cases)}
    raw.sort(key=lambda r: order.get((r["group"], r["name"]), 1 << 30))
    device = next((r.get("device") for r in raw if r.get("device")), "")
    datasheet = datasheet_peak_tflops(device) if device else None
    rows = [summarize(r, measured, datasheet) for r in raw]
    verdicts = {}
    for g in groups:
        logs = sorted((out / "nccl").glob(f"{g.name}.*.log"))
        if logs:
            verdicts[g.name] = judge_files(logs, require_efa=False).line
    lines = [f"device: {device or 'cpu'} x {gpus}; bf16 peak measured {measured:.0f} TFLOP/s (8192-cube matmul, median over ranks), "
             f"datasheet {datasheet or 'n/a'}" if measured else f"device: {device or 'cpu'} x {gpus}; no matmul peak measured"]
    if matmul:
        lines.append("matmul TFLOP/s by shape (rank 0): " + ", ".join(f"{k} {v:.0f}" for k, v in matmul["per_rank"][0].items()))
    lines += ["", format_table(rows), ""]
    lines += [f"- {c}" for c in comparisons(rows)]
    lines += [f"- NCCL transport, group {name}: {line}" for name, line in verdicts.items()]
    comparison = reduce_dtype_comparison(rows)
    if comparison:
        lines.append(f"- {comparison}")
    lines += [f"- {line}" for line in accumulation_comparison(rows, out)]
    lines += [f"- {line}" for line in round_lines(rows)]
    lines += [f"- {line}" for line in fp8_lines(rows, matmul, device)]
    emulation = emulation_rows(rows, links, BENCH_MODEL) if links else []
    if emulation:
        lines += ["", "Model against measurement (planning.plan; link bandwidth from this run):", "",
                  format_emulation(emulation)]
    text = "\n".join(lines)
    (out / "results.json").write_text(json.dumps({"measured_peak_tflops": measured, "matmul": matmul,
                                                  "datasheet_peak_tflops": datasheet, "transport": verdicts,
                                                  "links": links, "emulation": emulation, "cases": rows}, indent=1))
    (out / "table.md").write_text(text + "\n")
    return text
