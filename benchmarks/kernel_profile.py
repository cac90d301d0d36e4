"""Where a training step's GPU time goes, by kind of kernel: `python -m benchmarks.kernel_profile --out DIR`.

The trainer's own step (`benchmarks.bench`'s wiring of build_model, apply_fsdp, train_step), at each GPU
profile's shape: on one GPU, or on several under torchrun (`torchrun --nproc-per-node 2 -m
benchmarks.kernel_profile`), where every rank profiles and rank 0 analyses and writes. torch.profiler records every kernel of one step after warm-up; each
kernel is put in one of three classes:

- matmul: tensor-core kernels (cuBLAS/CUTLASS GEMMs, flash attention): their time scales with the
  GPU's bf16 TFLOP/s;
- memory: everything else that runs on the GPU (normalisations, activations, RoPE, the softmax of
  the loss, the optimizer's elementwise update, copies): their time scales with memory bandwidth;
- communication: NCCL kernels (none at one GPU, counted so that a stray one is seen).

With several GPUs the communication runs on its own streams beside the compute: the profile says how much of
it ran alone (exposed: the step waited for it) and how much under compute kernels (hidden, though it shares
the SMs and memory bandwidth with them).

The step's wall time less the kernels' busy time is idle (launch gaps, host work); the profile says where:
before the first kernel, after the last, and the longest gaps between kernels with what the host was doing.
The shares of the wall time are what planning/calibration.py's two-roofline compute model scales to other GPUs.
The run also measures the two ceilings of this GPU: a large bf16 matmul and a device-to-device copy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench import unwritable_folder
from benchmarks.levers import LEVERS
from benchmarks.suites import BENCH_MODEL, Case
from benchmarks.worker import linear_gemm_rates, matmul_rates
from training.fp8 import FP8_MIN_CAPABILITY

# Tensor-core kernels: cuBLAS (sm90_xmma, nvjet, *gemm*), CUTLASS, inductor's matmul templates
# (triton_tem_), and attention (flash / fmha / cuDNN SDPA).
_MATMUL = re.compile(r"gemm|xmma|cutlass|nvjet|wgmma|triton_tem_|flash|fmha|attention|sdpa", re.IGNORECASE)
_COMMUNICATION = re.compile(r"nccl", re.IGNORECASE)
# Memory-bound kernels whose names would match the above: inductor's pointwise/reduction kernels (named
# after the ops they fuse, attention's included), flash attention's helpers (dO.O, dQ conversion,
# accumulator clearing), cuBLAS's split-K reduction, and copies.
_MEMORY = re.compile(r"^triton_(poi|red|per)_|dot_do_o|convert_dq|clear_dkv|splitKreduce|^Memcpy|^Memset")
CLASSES = ("matmul", "memory", "communication")


def kernel_class(name: str) -> str:
    """matmul, memory or communication, by the kernel's name."""
    if _COMMUNICATION.search(name):
        return "communication"
    if not _MEMORY.search(name) and _MATMUL.search(name):
        return "matmul"
    return "memory"


@dataclass(frozen=True)
class Shape:
    """One step shape to profile: a GPU profile and overrides of it."""

    name: str
    profile: str
    overrides: dict
    levers: tuple[str, ...] = ()
    """Benchmark levers (benchmarks.levers) entered around the shape's build and steps."""


SHAPES = (
    Shape("l4 profile (1 x 2048 x 4, recomputation)", "l4", {}),
    Shape("h200 profile (8 x 4096, no recomputation)", "h200", {}),
    Shape("h200 shape with recomputation (8 x 4096)", "h200", {"activation_checkpointing": True}),
    Shape("l4 shape without recomputation (1 x 2048 x 4)", "l4", {"activation_checkpointing": False}),
    # One and sixteen micro-batches of the l4 shape: what a step costs once (the optimizer, the clipping)
    # and what each micro-batch adds, apart.
    Shape("l4 shape, one micro-batch (1 x 2048 x 1, recomputation)", "l4", {"grad_accum": 1}),
    Shape("l4 shape, 16 micro-batches (1 x 2048 x 16, recomputation)", "l4", {"grad_accum": 16}),
    # Issue 35: where float8's time goes (the casts and amax reductions are Inductor kernels: memory-bound;
    # _scaled_mm runs as cuBLAS/CUTLASS GEMMs: matmul), and whether its layers compile without graph breaks.
    Shape("h200 profile in fp8 (8 x 4096, tensorwise, float8 all-gather)", "h200", {"precision": "fp8"}),
    # Issue 39: why rowwise is slower (its GEMMs and casts beside tensorwise's), and fp8 at the l4 profile's shape:
    # with the h200 pair, the two points of fp8's cast cost per token and per micro-batch (planning/fp8.py).
    Shape("h200 profile in fp8 rowwise (8 x 4096)", "h200", {"precision": "fp8"}, ("fp8-rowwise",)),
    Shape("l4 profile in fp8 (1 x 2048 x 4, recomputation, tensorwise)", "l4", {"precision": "fp8"}),
)


# Tokens per micro-batch at which the converted linear layers' GEMMs are timed in bf16 and fp8: the l4 profile's
# (1 x 2048), the parity runs' (4 x 1024 = 4,096), the cluster's auto shape (4 x 2048) and the h200 profile's (8 x 4096).
GEMM_TOKENS = (2048, 4096, 8192, 32768)


# Host-side spans (FSDP2's hooks, compiled regions, record_function labels, aten ops) that say what the host
# was doing while the GPU had nothing to run.
_HOST = ("cpu_op", "user_annotation", "python_function")
STEP_LABEL = "training step"


def split_trace(events: list[dict], gaps: int = 12) -> dict:
    """Kernel time per class from a Chrome trace's events (times in microseconds), the busy time (the union
    of all kernel intervals, so overlapping streams count once), the top kernels, and where the GPU idled.

    Steps traced back to back, each in a STEP_LABEL span: the last step's kernels alone (those its host span
    launched, by correlation id), and the GPU's idle time between the previous step's last kernel and its
    first. One step: every kernel, and the idle time from the span's start to the first kernel and from the
    last kernel to the span's end. Then the longest gaps between kernels, each with its neighbours, the host
    spans around it and the host code that launched the kernel it waited for; and copies_to_host: each copy
    to the host and the host code that asked for it (a sync when that code is .item(), bool(), .cpu(); not
    the step's own read, training.step.on_host, which waits for its copy alone)."""
    host = [(float(e["ts"]) / 1e6, (float(e["ts"]) + float(e["dur"])) / 1e6, e["name"]) for e in events
            if e.get("ph") == "X" and e.get("cat") in _HOST]
    launches = {e["args"]["correlation"]: float(e["ts"]) / 1e6 for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = sorted((float(e["ts"]) / 1e6, (float(e["ts"]) + float(e["dur"])) / 1e6, e["name"],
                      e.get("args", {}).get("correlation"))
                     for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    steps = sorted((a, b) for a, b, name in host if name == STEP_LABEL)
    result: dict = {}
    if len(steps) > 1:
        last_step = steps[-1][0]
        earlier = [k for k in kernels if launches.get(k[3], last_step) < last_step]
        kernels = [k for k in kernels if launches.get(k[3], last_step) >= last_step]
        if earlier and kernels:
            result["idle_before_first_kernel_s"] = max(0.0, kernels[0][0] - max(k[1] for k in earlier))
    per_class = {c: 0.0 for c in CLASSES}
    per_kernel: dict[str, float] = {}
    busy, end, last = 0.0, float("-inf"), ""
    idle = []
    for start, stop, name, correlation in kernels:
        per_class[kernel_class(name)] += stop - start
        per_kernel[name] = per_kernel.get(name, 0.0) + stop - start
        if start > end > float("-inf"):
            idle.append((start - end, end, last, name, correlation))
        if stop > end:
            busy += stop - max(start, end)
            end, last = stop, name
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:25]
    result |= {"kernel_s": per_class, "busy_s": busy, "kernels": len(kernels),
               "communication_s": communication_overlap(kernels),
               "top": [{"name": name[:160], "class": kernel_class(name), "s": s} for name, s in top]}
    if not kernels:
        return result
    first = kernels[0][0]
    if len(steps) == 1:
        result["idle_before_first_kernel_s"] = max(0.0, first - steps[0][0])
        result["idle_after_last_kernel_s"] = max(0.0, steps[0][1] - end)
    result["idle_between_kernels_s"] = sum(g[0] for g in idle)

    def launched_by(correlation) -> list[str]:
        return _host_spans(host, launches[correlation], launches[correlation]) if correlation in launches else []

    result["gaps"] = [{"s": length, "at_s": at - first, "after": before[:100], "before": after[:100],
                       "host": _host_spans(host, at, at + length), "waited_for_launch_by": launched_by(correlation)}
                      for length, at, before, after, correlation in sorted(idle, reverse=True)[:gaps]]
    result["copies_to_host"] = [{"at_s": start - first, "launched_by": launched_by(correlation)}
                            for start, _, name, correlation in kernels if "DtoH" in name]
    return result


def communication_overlap(kernels: list[tuple]) -> dict:
    """Of the time any communication kernel runs: how long no compute kernel ran beside it (alone: the step
    waited for it) and how long one did (under compute). kernels: (start, stop, name, ...) in seconds."""
    edges = sorted(edge for start, stop, name, *_ in kernels
                   for edge in ((start, 1, kernel_class(name) == "communication"),
                                (stop, -1, kernel_class(name) == "communication")))
    running = {True: 0, False: 0}  # communication kernels, compute kernels
    alone = under = 0.0
    previous = None
    for at, change, communication in edges:
        if previous is not None and running[True]:
            if running[False]:
                under += at - previous
            else:
                alone += at - previous
        running[communication] += change
        previous = at
    return {"alone": alone, "under_compute": under}


def _host_spans(host: list[tuple[float, float, str]], start: float, stop: float, most: int = 6) -> list[str]:
    """The innermost host spans that cover most of [start, stop] (or the instant start == stop): what the host
    was doing then, innermost first."""
    covering = [(b - a, name) for a, b, name in host
                if min(b, stop) - max(a, start) >= 0.5 * (stop - start) and name != STEP_LABEL]
    return [name[:100] for _, name in sorted(covering)[:most]]


def shares(split: dict, wall_s: float) -> dict:
    """Each class's kernel time over the step's wall time, and the idle rest (never below zero)."""
    kernel = split["kernel_s"]
    total = sum(kernel.values())
    # Overlapping kernels (two streams) would sum past the busy time: scale the classes to it.
    scale = split["busy_s"] / total if total else 0.0
    out = {c: kernel[c] * scale / wall_s for c in CLASSES}
    out["idle"] = max(0.0, 1.0 - sum(out.values()))
    return out


def copy_bandwidth_gbps(device, gib: float = 2.0, repeats: int = 20) -> float:
    """Device-to-device copy of a large buffer, GB/s counting the bytes read plus the bytes written."""
    import torch

    n = int(gib * 2**30) // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 2 / statistics.median(times) / 1e9


def profile_shape(shape: Shape, model_name: str, device, warmup: int, steps: int, trace_dir: Path,
                  stack: bool = False, rank: int = 0, world: int = 1) -> dict | None:
    """The shape's profile on this rank's GPU; None on every rank but 0, which alone analyses its trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from benchmarks.worker import _meta_model, _trainer_step, time_steps
    from training.metrics import model_flops_per_token

    from torch._dynamo.utils import counters

    cfg = Case(shape.name, profile=shape.profile, overrides=shape.overrides).train_config(model_name)
    counters.clear()
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    with contextlib.ExitStack() as levers:
        for lever in shape.levers:
            levers.enter_context(LEVERS[lever]())
        model, optimizer, step = _trainer_step(cfg, device, rank, world, None)
        wall = time_steps(step, warmup, steps, device)["step_time_s"]  # back to back, as training runs them
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        # Two steps, the second analysed: its start overlaps the first's update, as in training. stack: Python frames
        # as host spans, so that a gap or a sync names the code behind it (the host then runs slower, idling the GPU).
        with profile(activities=activities, with_stack=stack) as prof:
            for i in range(2):
                with record_function(STEP_LABEL):
                    step(warmup + steps + i)
            sync()
    if rank != 0:
        del model, optimizer
        return None
    trace = trace_dir / f"{''.join(c if c.isalnum() else '-' for c in shape.name)}.json"
    prof.export_chrome_trace(str(trace))
    split = split_trace(json.loads(trace.read_text())["traceEvents"])
    trace.unlink()  # tens of MB; the split keeps what matters
    tokens = cfg.tokens_per_step_per_worker
    result = {"name": shape.name, "levers": list(shape.levers), "settings": {k: getattr(cfg, k) for k in (
                  "seq_len", "micro_batch", "grad_accum", "activation_checkpointing", "compile", "reshard_after_forward",
                  "precision")},
              "world_size": world, "tokens_per_step": tokens, "step_s": wall, "steps_timed": steps,
              "flops_per_token": model_flops_per_token(_meta_model(cfg), cfg.seq_len),
              "split": split, "shares": shares(split, wall),
              # torch.compile's record of this shape's steps: graphs made and the reasons it broke one.
              "compiled_graphs": counters["stats"]["unique_graphs"], "graph_breaks": dict(counters["graph_break"])}
    del model, optimizer
    if cuda:
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="profile-out", help="folder for kernel-profile.json")
    parser.add_argument("--model", default=BENCH_MODEL, help="built-in model config (random init)")
    parser.add_argument("--shapes", default=None, help=f"comma-separated indexes into the shapes (0..{len(SHAPES) - 1})")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per shape (compilation happens here)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per shape")
    parser.add_argument("--stack", action="store_true",
                        help="record Python frames, to name the code behind each gap and sync (slows the host)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    unwritable = unwritable_folder(out)
    if unwritable:
        print(f"error: --out: {args.out!r} is not a writable folder ({unwritable})", file=sys.stderr)
        return 2
    indexes = range(len(SHAPES)) if args.shapes is None else args.shapes.split(",")
    if any(not str(i).isdigit() or int(i) >= len(SHAPES) for i in indexes):
        print(f"error: --shapes: {args.shapes!r} must be comma-separated indexes from 0 to {len(SHAPES) - 1}",
              file=sys.stderr)
        return 2
    chosen = tuple(SHAPES[int(i)] for i in indexes)
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    own_group = not dist.is_initialized()
    if own_group:  # the trainer's FSDP wiring wants a process group, of one rank outside torchrun
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    result: dict = {"device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
                    "model": args.model, "world_size": world, "shapes": []}
    if cuda:
        result["matmul_tflops"] = matmul_rates(device)
        result["copy_gbps"] = copy_bandwidth_gbps(device)
        if torch.cuda.get_device_capability(device) >= FP8_MIN_CAPABILITY:
            try:
                result["linear_gemm_tflops"] = linear_gemm_rates(device, args.model, GEMM_TOKENS)
            except Exception as error:  # a probe beside the profile, which must still run
                result["linear_gemm_tflops"] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
    path = out / "kernel-profile.json"
    for shape in chosen:
        try:
            row = profile_shape(shape, args.model, device, args.warmup, args.steps, out, args.stack, rank, world)
        except Exception as error:  # one failing shape must not cost the others
            row = {"name": shape.name, "error": f"{type(error).__name__}: {str(error)[:300]}"}
        if rank != 0:
            continue
        result["shapes"].append(row)
        path.write_text(json.dumps(result, indent=1))  # after each shape: a cut-off run keeps what it measured
        print(format_row(row), flush=True)
    if own_group:
        dist.destroy_process_group()
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def format_row(row: dict) -> str:
    if "error" in row:
        return f"{row['name']}: {row['error']}"
    s, split = row["shares"], row["split"]
    k = split["kernel_s"]
    line = (f"{row['name']}: {row['step_s']:.3f} s/step, {row['tokens_per_step'] / row['step_s']:,.0f} tok/s; "
            f"matmul {s['matmul']:.1%} ({k['matmul']:.3f} s), memory {s['memory']:.1%} ({k['memory']:.3f} s), "
            f"communication {s['communication']:.1%}, idle {s['idle']:.1%}; {split['kernels']} kernels")
    communication = split.get("communication_s", {})
    if k["communication"]:
        line += (f"\n  communication: {communication['alone'] * 1e3:.1f} ms alone (the step waited), "
                 f"{communication['under_compute'] * 1e3:.1f} ms under compute kernels")
    idle = [f"{split[key] * 1e3:.1f} ms {where}" for key, where in (
        ("idle_before_first_kernel_s", "before the first kernel"), ("idle_between_kernels_s", "between kernels"),
        ("idle_after_last_kernel_s", "after the last")) if key in split]
    if idle:
        line += f"\n  idle (profiled step): {', '.join(idle)}"
    for gap in split.get("gaps", [])[:5]:
        line += (f"\n  gap {gap['s'] * 1e3:.2f} ms at {gap['at_s'] * 1e3:.1f} ms: {gap['after'][:40]} -> {gap['before'][:40]}"
                 f"; host: {', '.join(gap['host'][:2]) or '-'}; launched by: {', '.join(gap['waited_for_launch_by'][:3]) or '-'}")
    for copy in split.get("copies_to_host", []):
        line += f"\n  copy to the host at {copy['at_s'] * 1e3:.1f} ms, asked by: {', '.join(copy['launched_by'][:4]) or '-'}"
    return line


if __name__ == "__main__":
    sys.exit(main())
