"""fp8 against bf16 on the loss, judged only once its control passes: `python -m benchmarks.parity --out DIR`.

Issue 39: from random initialisation on pattern data at lr 3e-4, two bf16 runs of the same seed and code ended 5.8%
apart (GPU non-determinism grows in the chaotic early phase), so a criterion that its own control fails said
nothing about fp8. Here:

- Data with real structure, made on the machine: the Python standard library's source files of the interpreter
  that runs this (os.py's folder, site-packages left out), as UTF-8 bytes: token ids 0..255, ByT5's scheme, so no
  tokenizer is downloaded. Files whose path hashes to 0 mod 10 are held out for validation.
- One warm start: bf16 from the seeded random init for --warm-steps at the trainer's default lr (3e-4), saved with
  the trainer's own checkpoint (training.checkpoint). Every branch resumes from it (an fp8 branch loads the bf16
  checkpoint, as a user switching precision would) and trains --steps more at a fine-tuning learning rate
  (BRANCH_LR, cosine to a tenth), in its own data order.
- Branches (BRANCHES): bf16 in data orders 1, 2 and 3; bf16 in order 1 again, the control; fp8 in orders 1 and 2.
  --branches runs a subset, or a control in another order ("bf16, order 2, repeated (control)"); a run without all
  three bf16 orders takes its tolerance from an earlier run's file (--tolerance-from).
- The criterion, fixed before any fp8 branch is judged (criterion()): its tolerance is how far the data order alone
  moves bf16's final validation loss, the relative range of the three bf16 orders. A branch is at parity with the
  bf16 branch of its order when its final validation loss, and its mean training loss over the last third of the
  steps (the same batches), are both within the tolerance. The control is judged first; fp8 only if it passes.

--cpu runs it on the tiny model with torchao's float8 emulation (the tests'); results go to OUT/parity.json, and
`--plot OUT/parity.json PNG` draws the curves.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

BRANCH_LR = 1e-4
BRANCHES = (("bf16, order 1", "bf16", 1), ("bf16, order 2", "bf16", 2), ("bf16, order 3", "bf16", 3),
            ("bf16, order 1, repeated (control)", "bf16", 1), ("fp8, order 1", "fp8", 1), ("fp8, order 2", "fp8", 2))
CONTROL = "bf16, order 1, repeated (control)"
CONTROL_SUFFIX = ", repeated (control)"
BRANCH_NAME = re.compile(r"(bf16|fp8), order ([1-9])((?:, repeated \(control\))?)")
HELD_OUT_EVERY = 10


def source_files(root: Path) -> list[Path]:
    """The standard library's .py files under root, by relative path (installed packages left out)."""
    return sorted((p for p in root.rglob("*.py") if not {"site-packages", "dist-packages"} & set(p.parts)),
                  key=lambda p: p.relative_to(root).as_posix())


def held_out(relative: str) -> bool:
    return hashlib.sha256(relative.encode()).digest()[0] % HELD_OUT_EVERY == 0


def corpus(root: Path, validation: bool) -> torch.Tensor:
    """The training (or held-out) files' bytes, one file after another, as one uint8 tensor."""
    chunks = [p.read_bytes() for p in source_files(root) if held_out(p.relative_to(root).as_posix()) == validation]
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def order_batches(stream: torch.Tensor, seq_len: int, micro_batch: int, order: int, rank: int, world: int):
    """Micro-batches of seq_len + 1 byte blocks in the data order `order` (a seeded permutation of the blocks,
    drawn again each epoch); micro-step m of rank r holds global blocks m*W*B + r*B ... + B-1 (training.data's rule)."""
    blocks = stream[: len(stream) // (seq_len + 1) * (seq_len + 1)].view(-1, seq_len + 1)
    generator = torch.Generator().manual_seed(order)
    permutation, m = torch.randperm(len(blocks), generator=generator), 0
    while True:
        first = m * world * micro_batch + rank * micro_batch
        if first + micro_batch > len(permutation):
            permutation, m = torch.randperm(len(blocks), generator=generator), 0
            continue
        rows = blocks[permutation[first:first + micro_batch]].long()
        yield {"input_ids": rows[:, :-1], "labels": rows[:, 1:]}
        m += 1


def held_out_batches(root: Path, seq_len: int, micro_batch: int, count: int, rank: int, world: int) -> list[dict]:
    """The validation every branch is judged on: this rank's first `count` micro-batches of the held-out files
    (data order 0, the same for every branch)."""
    return list(itertools.islice(order_batches(corpus(root, True), seq_len, micro_batch, 0, rank, world), count))


def relative_range(values: list[float]) -> float:
    return (max(values) - min(values)) / (sum(values) / len(values))


def tail_mean(losses: list[float]) -> float:
    """The mean training loss of the last third of the steps (the last step, for fewer than three)."""
    tail = losses[-max(1, len(losses) // 3):]
    return sum(tail) / len(tail)


def branches(names: str | None) -> list[tuple[str, str, int]]:
    """(name, precision, data order) of each '|'-separated branch name (None: BRANCHES); ValueError naming
    --branches for a name that is no branch. A control is bf16 repeated in an order that is also run."""
    if names is None:
        return list(BRANCHES)
    chosen = []
    for name in names.split("|"):
        match = BRANCH_NAME.fullmatch(name.strip())
        if not match or (match[3] and match[1] != "bf16"):
            raise ValueError(f"--branches: {name.strip()!r} is no branch; names are 'bf16, order N', 'fp8, order N' and "
                             f"'bf16, order N{CONTROL_SUFFIX}' (N from 1 to 9), '|'-separated")
        chosen.append((name.strip(), match[1], int(match[2])))
    for name, _, order in chosen:
        if name.endswith(CONTROL_SUFFIX) and f"bf16, order {order}" not in [c[0] for c in chosen]:
            raise ValueError(f"--branches: the control {name!r} needs 'bf16, order {order}' in the same run")
    return chosen


def is_control(name: str) -> bool:
    return name.endswith(CONTROL_SUFFIX)


def criterion(runs: dict[str, dict]) -> float:
    """The tolerance, from the bf16 branches of different data orders alone: their final validation losses'
    relative range (largest minus smallest, over their mean)."""
    return relative_range([run["val_loss"] for name, run in runs.items()
                           if name.startswith("bf16, order") and not is_control(name)])


def judge(name: str, run: dict, reference: dict, tolerance: float) -> tuple[bool, str]:
    """(at parity, one line): final validation loss and last-third mean training loss against the bf16 branch of the
    same data order, each within the tolerance."""
    val_gap = run["val_loss"] / reference["val_loss"] - 1
    tail_gap = tail_mean(run["losses"]) / tail_mean(reference["losses"]) - 1
    step_gaps = [abs(a / b - 1) for a, b in zip(run["losses"], reference["losses"])]
    worst = max(range(len(step_gaps)), key=step_gaps.__getitem__)
    holds = abs(val_gap) <= tolerance and abs(tail_gap) <= tolerance
    return holds, (f"{name}: validation loss {run['val_loss']:.4f} vs {reference['val_loss']:.4f} ({val_gap:+.3%}), "
                   f"last-third training loss {tail_gap:+.3%} (largest single step {step_gaps[worst]:.2%} at step "
                   f"{worst + 1}): {'parity holds' if holds else 'parity fails'} (tolerance {tolerance:.3%})")


def verdict_lines(runs: dict[str, dict], earlier: dict | None = None) -> list[str]:
    """The tolerance, the control's verdict, then each fp8 branch's (only where the control passed). earlier: the
    tolerance {"tolerance", "file", "device"} of an earlier run, for a run without the three bf16 orders."""
    if earlier is None:
        tolerance = criterion(runs)
        orders = ", ".join(f"{run['val_loss']:.4f}" for name, run in runs.items()
                           if name.startswith("bf16, order") and not is_control(name))
        lines = [f"tolerance: {tolerance:.3%}, the relative range of bf16's final validation loss over data orders ({orders})"]
    else:
        tolerance = earlier["tolerance"]
        lines = [f"tolerance: {tolerance:.3%}, from {earlier['file']} ({earlier['device']}): its bf16 data orders' range"]
    controls = [name for name in runs if is_control(name)]
    passed = bool(controls)
    for name in controls:
        holds, line = judge(name, runs[name], runs[f"bf16, order {runs[name]['order']}"], tolerance)
        passed = passed and holds
        lines.append(f"control: {line}")
    for name, run in runs.items():
        if name.startswith("fp8"):
            reference = runs.get(f"bf16, order {run['order']}")
            lines.append(f"{name}: not judged: no bf16 branch in order {run['order']}" if reference is None
                         else judge(name, run, reference, tolerance)[1] if passed
                         else f"{name}: not judged: " + ("the control fails the criterion" if controls else "no control ran"))
    return lines


def earlier_tolerance(path: str) -> dict:
    """The tolerance an earlier run's parity.json sets (its three bf16 orders), with where it came from."""
    earlier = json.loads(Path(path).read_text())
    return {"tolerance": criterion(earlier["runs"]), "file": Path(path).name, "device": earlier["device"]}


@contextlib.contextmanager
def emulated_fp8():
    """--cpu: torchao's float8 emulated in high precision (no FP8 hardware; the tests' way)."""
    from unittest import mock

    from training import fp8, model

    with mock.patch.object(model, "check_fp8_device", lambda device: None), \
         mock.patch.object(model, "convert_to_fp8", lambda m: fp8.convert_to_fp8(m, emulate=True)):
        yield


def _scratch_root() -> str | None:
    """Memory-backed /dev/shm for the warm checkpoint where it has room (fp32 weights and AdamW: 16 bytes a
    parameter, 25 GB for Qwen2.5-1.5B), else the temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > 40e9 else None


def run(args, earlier: dict | None = None) -> dict:
    import dataclasses

    import torch.distributed as dist

    from training import checkpoint as ckpt
    from training.config import GPU_PROFILES, TrainConfig
    from training.fp8 import after_optimizer_step
    from training.model import build_model, full_state_dict_on_rank0, model_config
    from training.schedule import lr_at
    from training.step import evaluate, make_optimizer, train_step

    cuda = torch.cuda.is_available() and not args.cpu
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517"), ("RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(name, value)  # one process outside torchrun
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    root = Path(os.__file__).parent
    train, validation = corpus(root, False), corpus(root, True)
    # The h200 profile (compiled layers, no recomputation, weights kept gathered) at the branch's shape; "pattern"
    # only picks plain causal SDPA, as for unpacked data (each block is one stretch of text).
    base = TrainConfig(model=args.model, **{**GPU_PROFILES["h200"], "seq_len": args.seq_len, "micro_batch": args.micro_batch},
                       data="pattern", seed=0)
    state = full_state_dict_on_rank0(base, model_config(base)) if rank == 0 else {}
    held = held_out_batches(root, args.seq_len, args.micro_batch, args.eval_batches, rank, world)
    scratch = [tempfile.mkdtemp(dir=_scratch_root()) if rank == 0 else None]  # one folder for every rank's shards
    dist.broadcast_object_list(scratch, src=0)
    scratch = Path(scratch[0])
    results = {"corpus": {"root": str(root), "train_bytes": len(train), "validation_bytes": len(validation),
                          "python": sys.version.split()[0]}, "settings": vars(args) | {"branch_lr": BRANCH_LR},
               "device": torch.cuda.get_device_name(device) if cuda else "cpu", "runs": {}}
    if earlier:
        results["earlier"] = earlier

    def train_for(cfg, steps: int, order: int, lr, after=None) -> tuple:
        with emulated_fp8() if args.cpu and cfg.precision == "fp8" else contextlib.nullcontext():
            model = build_model(cfg, device, rank, world, state)
        optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, device)
        if after:
            after(model, optimizer)
        batches, losses = order_batches(train, args.seq_len, args.micro_batch, order, rank, world), []
        started = time.perf_counter()
        for i in range(steps):
            losses.append(train_step(model, optimizer, batches, 1, cfg.grad_clip, lr(i), device,
                                     after_update=after_optimizer_step if cfg.precision == "fp8" else None).loss)
        return model, optimizer, losses, (time.perf_counter() - started) / steps

    warm_cfg = dataclasses.replace(base, precision="bf16")
    model, optimizer, losses, step_s = train_for(warm_cfg, args.warm_steps, 0,
                                                 lambda i: lr_at(i, warm_cfg.lr, args.warm_steps // 10, 10**9, 1.0))
    results["warm"] = {"losses": losses, "val_loss": evaluate(model, held, device)[0], "step_s": step_s}
    if rank == 0:
        print(json.dumps({"name": "warm bf16", "val_loss": results["warm"]["val_loss"], "step_s": step_s}), flush=True)
    ckpt.save(scratch / "warm", model, optimizer, args.warm_steps, 0, rank)
    del model, optimizer
    for name, precision, order in args.branches:
        cfg = dataclasses.replace(base, precision=precision)
        model, optimizer, losses, step_s = train_for(
            cfg, args.steps, order, lambda i: lr_at(i, BRANCH_LR, 0, args.steps, 0.1),
            after=lambda m, o: ckpt.load(scratch / "warm", m, o))
        results["runs"][name] = {"precision": precision, "order": order, "losses": losses, "step_s": step_s,
                                 "val_loss": evaluate(model, held, device)[0],
                                 "peak_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0}
        if rank == 0:  # after each branch: a run cut off keeps what it measured
            print(json.dumps({"name": name, "val_loss": results["runs"][name]["val_loss"], "step_s": step_s}), flush=True)
            (Path(args.out) / "parity.json").write_text(json.dumps(results, indent=1))
        del model, optimizer
        if cuda:
            torch.cuda.empty_cache()
    dist.barrier()
    if rank == 0:
        shutil.rmtree(scratch)  # the warm checkpoint: 16 bytes a parameter, in memory where /dev/shm held it
    dist.destroy_process_group()
    return results


def plot(results: dict, png: str) -> None:
    """Each branch's training loss (a 10-step moving mean) and its gap to bf16 in the same data order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def smooth(values: list[float], width: int = 10) -> list[float]:
        return [sum(values[max(0, i - width + 1):i + 1]) / len(values[max(0, i - width + 1):i + 1]) for i in range(len(values))]

    runs = results["runs"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for name, r in runs.items():
        style = "-" if r["precision"] == "bf16" else "--"
        top.plot(range(1, len(r["losses"]) + 1), smooth(r["losses"]), style, label=f"{name} (val {r['val_loss']:.4f})")
        reference = runs[f"bf16, order {r['order']}"]
        if r is not reference:
            gap = [100 * (a / b - 1) for a, b in zip(smooth(r["losses"]), smooth(reference["losses"]))]
            bottom.plot(range(1, len(gap) + 1), gap, style, label=f"{name} vs bf16, order {r['order']}")
    top.set_ylabel("training loss (10-step mean)")
    top.legend(fontsize=7)
    bottom.set_ylabel("% vs bf16, same batches")
    bottom.set_xlabel("step after the warm bf16 checkpoint")
    bottom.axhline(0, color="grey", lw=0.5)
    bottom.legend(fontsize=7)
    fig.suptitle(f"fp8 vs bf16 from one warm checkpoint ({results['device']}); "
                 + verdict_lines(runs, results.get("earlier"))[0].split(",")[0])
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="parity-out", help="folder for parity.json")
    parser.add_argument("--model", default="qwen2.5-1.5b", help="built-in model config (random init)")
    parser.add_argument("--warm-steps", type=int, default=200)
    parser.add_argument("--steps", type=int, default=300, help="steps of each branch")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--eval-batches", type=int, default=16, help="held-out micro-batches per rank")
    parser.add_argument("--cpu", action="store_true", help="on the CPU over gloo, fp8 emulated (tests)")
    parser.add_argument("--branches", default=None,
                        help="'|'-separated branches to run, in this order (default: all of BRANCHES); "
                             "a control in order N: 'bf16, order N, repeated (control)'")
    parser.add_argument("--tolerance-from", default=None, metavar="JSON",
                        help="an earlier run's parity.json whose bf16 data orders set the tolerance (for --branches "
                             "without all three)")
    parser.add_argument("--plot", nargs=2, metavar=("JSON", "PNG"), help="draw an earlier run's curves, and print its verdict")
    args = parser.parse_args(argv)
    if args.plot:
        results = json.loads(Path(args.plot[0]).read_text())
        plot(results, args.plot[1])
        print("\n".join(verdict_lines(results["runs"], results.get("earlier"))))
        return 0
    if min(args.warm_steps, args.steps, args.seq_len, args.micro_batch, args.eval_batches) < 1:
        print("error: --warm-steps, --steps, --seq-len, --micro-batch and --eval-batches must be at least 1", file=sys.stderr)
        return 2
    try:
        args.branches = branches(args.branches)
        earlier = earlier_tolerance(args.tolerance_from) if args.tolerance_from else None
    except (ValueError, OSError, KeyError) as error:
        print(f"error: {error if isinstance(error, ValueError) else f'--tolerance-from: {args.tolerance_from}: {error}'}",
              file=sys.stderr)
        return 2
    orders = {order for name, precision, order in args.branches if precision == "bf16" and not is_control(name)}
    if earlier is None and len(orders) < 3:
        print("error: --branches: fewer than three bf16 data orders set no tolerance; add --tolerance-from an earlier "
              "run's parity.json", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results = run(args, earlier)
    if int(os.environ.get("RANK", 0)) == 0:
        print("\n".join(verdict_lines(results["runs"], earlier)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
