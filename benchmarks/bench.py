"""GPU benchmark of the trainer: `python -m benchmarks.bench --help`.

Runs the trainer's own model build (build_model), FSDP2 wiring and training step (train_step)
under torchrun on the GPUs of one machine, without Ray, on Qwen2.5-1.5B with random init and
random tokens. Next to it, a baseline with the AWS example's recipe (FSDP1 with a size-based
wrap policy at 1e7 parameters, weights and AdamW in bf16, Hugging Face's own loss) at its own
shape and at ours. It measures the GPU's bf16 matmul rate in the same run, so MFU is reported
against that measured peak and against the datasheet's.

Each group of cases is one torchrun (one NCCL environment: the normal path, or sockets only);
every case builds its model afresh in that process group and reports rank 0's timing. Results
land in OUT/results.json and OUT/table.md; NCCL logs in OUT/nccl/, with a transport verdict
per group.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.levers import PEER_MODULE
from benchmarks.report import report
from benchmarks.suites import BENCH_MODEL, Group, plan, with_rounds
from benchmarks.worker import worker
from training.config import BUILTIN_MODELS


# peft (and its two missing dependencies) and liger-kernel as wheels (`make bench-wheels`), for a GPU
# machine without them: installed into OUT/site-packages, never into its environment.
WHEELS = Path(__file__).resolve().parent.parent / ".whl"


def run_group(group: Group, out: Path, args) -> int:
    spec = {"name": group.name, "env": group.env, "measure_matmul": group.measure_matmul,
            "gpus_per_node": group.gpus_per_node, "measure_links": group.measure_links,
            "cases": [dataclasses.asdict(c) for c in group.cases]}
    spec_file = out / f"group-{group.name}.json"
    spec_file.write_text(json.dumps(spec, indent=1))
    nccl_dir = out / "nccl"
    nccl_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **group.env, **extra_path(args.site), "NCCL_DEBUG": "INFO",
           "NCCL_DEBUG_FILE": str(nccl_dir / f"{group.name}.%h.%p.log"), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    if group.world_size < args.gpus and "CUDA_VISIBLE_DEVICES" not in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(group.world_size))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={group.world_size}",
               "-m", "benchmarks.bench", "--worker", str(spec_file), "--out", str(out), "--model", args.model,
               "--warmup", str(args.warmup), "--steps", str(args.steps)]
    print(f"== group {group.name}: {group.world_size} GPU(s), {len(group.cases)} case(s), env {group.env or 'normal'}", flush=True)
    with open(out / f"group-{group.name}.log", "w", buffering=1) as log:  # a killed run keeps its rows
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log.write(line)
            if line.startswith("{") or "Error" in line or "error" in line.split(":")[0]:
                print(line.rstrip()[:400], flush=True)
        return proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--suite", default="full",
                        choices=("full", "variants", "mfu", "l4", "smoke", "layouts", "accumulation", "lora", "fp8",
                                 "fp8-80gb"),
                        help="full: default profile, example recipe, the peer recipe (FSDP2 + Liger, when liger-kernel is "
                             "installed or its wheel is in .whl/), L4 profile, sockets A/B, one GPU; "
                             "variants: the levers one at a time; mfu: the h200 step's kernel and communication levers beside the "
                             "peer recipe, FSDP2 + Liger kernels (needs liger-kernel: installed, or its wheel in .whl/); l4: the L4 profile's communication "
                             "lever on NVLink and on sockets; smoke: two quick cases; layouts: full, gathered and "
                             "hybrid at world size 2 as two nodes, on NVLink and sockets, with link bandwidth and "
                             "the model's prediction (2 GPUs); accumulation: fp32 vs bf16 gradient accumulation and "
                             "reduction, 300 steps, then their speed on sockets (2 GPUs); lora: LoRA rank 16 against full fine-tuning, "
                             "Qwen2.5-1.5B and 7B shapes, at the h200 profile and the capped l4 profile (needs peft: "
                             "installed, or its wheels in .whl/ from `make bench-wheels`); fp8: bf16 against fp8 "
                             "and its levers beside the bf16 and an FP8 peer recipe (fp8-80gb: the same at 4 x 4096, for 80 GB GPUs; "
                             "both need torchao and liger-kernel: installed, or their wheels in .whl/); fp8's loss parity is "
                             "python -m benchmarks.parity")
    parser.add_argument("--groups", default=None, help="comma-separated subset of the suite's groups to run")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all visible)")
    parser.add_argument("--model", default=BENCH_MODEL, help="built-in model config (random init)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per case (compilation happens here)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per case")
    parser.add_argument("--cases", default=None, help="'|'-separated names of the selected groups' cases to run (default: all)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each group's cases this many times in turn, and report each case's median")
    parser.add_argument("--out", default="bench-out", help="output folder")
    parser.add_argument("--cpu", action="store_true", help="run on CPU with gloo (tests of the benchmark itself)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.out, args.model, args.warmup, args.steps)
        return 0
    error = check_args(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    args.site = None
    if args.suite in SUITE_PACKAGES:
        package, required = SUITE_PACKAGES[args.suite]
        try:
            args.site = wheel_site(out, package)
        except RuntimeError as error:
            if required:
                print(f"error: --suite {args.suite}: {error}", file=sys.stderr)
                return 2
            print(f"note: {error}: the peer recipe's case will say so", file=sys.stderr)
    groups = plan(args.suite, args.gpus)
    if args.groups:
        known, wanted = [g.name for g in groups], args.groups.split(",")
        unknown = [name for name in wanted if name not in known]
        if unknown:
            print(f"error: --groups: {', '.join(unknown)} not in suite {args.suite} on {args.gpus} GPU(s); "
                  f"its groups: {', '.join(known)}", file=sys.stderr)
            return 2
        groups = [g for g in groups if g.name in wanted]
    if args.cases:
        known, wanted = [c.name for g in groups for c in g.cases], args.cases.split("|")
        unknown = [name for name in wanted if name not in known]
        if unknown:
            print(f"error: --cases: {', '.join(unknown)} not in the selected groups; their cases: {' | '.join(known)}",
                  file=sys.stderr)
            return 2
        groups = [dataclasses.replace(g, cases=[c for c in g.cases if c.name in wanted]) for g in groups]
        groups = [g for g in groups if g.cases]
    groups = with_rounds(groups, args.rounds)
    failed = [g.name for g in groups if run_group(g, out, args) != 0]
    print(report(out, groups, args.gpus))
    if failed:
        print(f"error: group(s) {', '.join(failed)} exited non-zero; see {out}/group-<name>.log", file=sys.stderr)
        return 1
    return 0


def unwritable_folder(out: Path) -> str | None:
    """Why the results cannot be written to this folder (made if missing), or None: found before
    the GPUs are booked, not at the first result."""
    if out.exists() and not out.is_dir():
        return "it is a file"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        return error.strerror
    return None


# The package a suite needs beyond the trainer's own (its import name), from .whl/ when missing.
# (import name, whether the suite is refused without it): the full suite runs without its peer.
SUITE_PACKAGES = {"lora": ("peft", True), "mfu": (PEER_MODULE, True), "full": (PEER_MODULE, False),
                  "fp8": ("torchao", True), "fp8-80gb": ("torchao", True)}


def wheel_site(out: Path, package: str) -> str | None:
    """Where the workers import `package` from: None when it is installed, else OUT/site-packages, filled
    from the wheels in .whl/ (offline, without dependencies: the rest comes with transformers and torch)."""
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        return None
    wheels = sorted(str(w) for w in WHEELS.glob("*.whl"))
    if not wheels:
        raise RuntimeError(f"{package} is not installed and {WHEELS} holds no wheels (make bench-wheels, then carry .whl)")
    site = out / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(site),
                    *wheels], check=True)
    print(f"{package} from {', '.join(Path(w).name for w in wheels)}, installed into {site}", flush=True)
    return str(site)


def extra_path(site: str | None) -> dict[str, str]:
    """PYTHONPATH with `site` in front (nothing when None)."""
    if site is None:
        return {}
    return {"PYTHONPATH": os.pathsep.join([site, *filter(None, [os.environ.get("PYTHONPATH")])])}


def check_args(args) -> str | None:
    """Fill in --gpus and refuse what cannot run, as one line naming the option."""
    if args.model not in BUILTIN_MODELS:
        return f"--model: {args.model!r} is not a built-in config ({', '.join(BUILTIN_MODELS)})"
    if args.warmup < 1 or args.steps < 1:
        return f"--warmup/--steps: {args.warmup}/{args.steps} must both be at least 1"
    if args.rounds < 1:
        return f"--rounds: {args.rounds} must be at least 1"
    if args.gpus is not None and args.gpus < 1:
        return f"--gpus: {args.gpus} must be at least 1"
    unwritable = unwritable_folder(Path(args.out))
    if unwritable:
        return f"--out: {args.out!r} is not a writable folder ({unwritable})"
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        args.gpus = args.gpus or 1
        return None
    import torch

    visible = torch.cuda.device_count()
    if visible == 0:
        return "no CUDA GPU visible: the benchmark needs at least one (--cpu runs it on CPU for testing)"
    args.gpus = args.gpus or visible
    if not 1 <= args.gpus <= visible:
        return f"--gpus: {args.gpus} must be between 1 and the {visible} visible GPU(s)"
    return None


if __name__ == "__main__":
    sys.exit(main())
