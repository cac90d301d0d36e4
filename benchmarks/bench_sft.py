"""GPU figures of the fine-tuning features, on one GPU: `python -m benchmarks.bench_sft --out DIR [--part ...]`.

masking: the trainer's step on packed documents (position ids restart at each document, lengths
  drawn like chat SFT data) against plain causal attention at the same shapes, with SDPA and with
  flex attention, at the h200 and l4 profiles' shapes.
checkpoint: how long the training loop pauses per checkpoint of Qwen2.5-1.5B (fp32 weights and
  AdamW state): a synchronous DCP save to the local disk against the trainer's asynchronous save,
  and the step time while the background write runs.
Runs the trainer's own build_model, train_step and checkpoint code (torchrun, world size 1, no Ray).
Results: OUT/sft-<part>.json, and one line per case on stdout.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from training.config import GPU_PROFILES, TrainConfig
from training.config_rules import validate

MODEL = "qwen2.5-1.5b"
# Chat SFT documents: log-normal lengths, median 256 tokens (most chats are short, a few are long).
DOC_MEDIAN_TOKENS = 256


def packed_random_batches(seed: int, vocab: int, seq_len: int, micro_batch: int, median: int):
    """Random-token documents of log-normal length, packed as the trainer packs real data."""
    import torch

    from training.data import pack

    rng = random.Random(seed)
    ready: list[dict] = []
    while True:
        while len(ready) < micro_batch:
            docs, total = [], 0
            while total < 8 * micro_batch * seq_len:
                length = max(8, min(seq_len, int(rng.lognormvariate(0, 1) * median)))
                docs.append(([rng.randrange(vocab) for _ in range(length)], [True] * length, False))
                total += length
            blocks = pack(docs, seq_len, pad_id=0)
            # pack orders blocks by their longest document: shuffle, or a batch would hold only long ones.
            order = list(range(len(blocks["input_ids"])))
            rng.shuffle(order)
            ready += [{k: torch.as_tensor(v[i]) for k, v in blocks.items()} for i in order]  # rows and per-block counts
        batch, ready = ready[:micro_batch], ready[micro_batch:]
        yield {k: torch.stack([b[k] for b in batch]) for k in batch[0]}


def time_training(cfg: TrainConfig, device, batches, warmup: int, steps: int) -> dict:
    import torch

    from training.metrics import model_flops_per_token, peak_memory_gib, rates
    from training.model import build_model
    from training.step import make_optimizer, train_step

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(cfg, device, 0, 1)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, device)
    try:
        times = []
        for i in range(warmup + steps):
            if cuda:
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            result = train_step(model, optimizer, batches, cfg.grad_accum, cfg.grad_clip, cfg.lr, device,
                                keep_weights_gathered=not cfg.reshard_after_forward)
            if cuda:
                torch.cuda.synchronize(device)
            if i >= warmup:
                times.append(time.perf_counter() - started)
        step_s = statistics.median(times)
        tps, tflops, _ = rates(cfg.tokens_per_step_per_worker, step_s, model_flops_per_token(model, cfg.seq_len), None)
        return {"step_time_s": step_s, "tokens_per_s_per_gpu": tps, "tflops_per_gpu": tflops,
                "peak_mem_gib": peak_memory_gib(device), "final_loss": result.loss}
    finally:
        del model, optimizer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


def masking(device, warmup: int, steps: int, profiles: tuple[str, ...]) -> list[dict]:
    import torch

    from training.data import synthetic_batches

    rows = []
    # One GPU holds a whole unsharded model: the l4 shape runs without the L4's memory cap here
    # (its fp32 weights and AdamW state alone exceed 22 GiB); the relative cost is what is measured.
    for profile in profiles:
        for attention in ("sdpa", "flex"):
            for data in ("causal", "packed"):
                cfg = validate(TrainConfig(model=MODEL, profile=profile, data="random", attention=attention,
                                           **{**GPU_PROFILES[profile], "grad_accum": 1}))
                source = (synthetic_batches("random", 0, 151936, cfg.seq_len, cfg.micro_batch, 0, 1) if data == "causal"
                          else packed_random_batches(0, 151936, cfg.seq_len, cfg.micro_batch, DOC_MEDIAN_TOKENS))
                batches = iter(list(itertools.islice(source, warmup + steps)))  # made before the clock starts
                row = {"part": "masking", "profile": profile, "attention": attention, "data": data,
                       "seq_len": cfg.seq_len, "micro_batch": cfg.micro_batch}
                try:
                    row |= time_training(cfg, device, batches, warmup, steps)
                except torch.OutOfMemoryError:
                    row |= {"error": "out of memory"}
                except Exception as error:  # one broken case must not cost the rest
                    row |= {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"}
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def checkpoint(device, steps: int, folder: str, modes: tuple[str, ...] = ("sync", "async")) -> list[dict]:
    """Sync vs async save of the h200-profile model after a few steps (so AdamW state exists)."""
    import torch

    from training import checkpoint as ckpt
    from training.data import synthetic_batches
    from training.model import build_model
    from training.step import make_optimizer, train_step

    cfg = validate(TrainConfig(model=MODEL, profile="h200", data="random", **{**GPU_PROFILES["h200"], "grad_accum": 1}))
    model = build_model(cfg, device, 0, 1)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, device)
    batches = synthetic_batches("random", 0, 151936, cfg.seq_len, cfg.micro_batch, 0, 1)

    def step() -> float:
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        train_step(model, optimizer, batches, 1, 1.0, cfg.lr, device, keep_weights_gathered=True)
        torch.cuda.synchronize(device)
        return time.perf_counter() - started

    for _ in range(3):
        step()
    baseline = statistics.median(step() for _ in range(steps))

    def size(path: str) -> int:
        return sum(f.stat().st_size for f in Path(path).iterdir())

    rows = []
    if "sync" in modes:
        sync_dir = tempfile.mkdtemp(dir=folder)
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        ckpt.save(sync_dir, model, optimizer, 3, 3, 0)
        os.sync()
        rows.append({"part": "checkpoint", "mode": "sync", "stall_s": time.perf_counter() - started,
                     "bytes": size(sync_dir), "baseline_step_s": baseline})
        shutil.rmtree(sync_dir)
    saver = ckpt.AsyncSaver()
    for attempt in ("first", "second"):  # the first allocates the pinned staging buffers, later ones reuse them
        async_dir = tempfile.mkdtemp(dir=folder)
        pending = saver.start(async_dir, model, optimizer, 3, 3, 0)
        during = []
        while not pending.future.done():
            during.append(step())
        saver.finish()
        os.sync()
        written = size(async_dir)
        shutil.rmtree(async_dir)
        rows.append({"part": "checkpoint", "mode": f"async ({attempt})", "stall_s": pending.stall_s,
                     "write_s": time.perf_counter() - pending.started, "bytes": written,
                     "steps_during_write": len(during),
                     "step_s_during_write": statistics.median(during) if during else None, "baseline_step_s": baseline})
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_sft", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--part", choices=("masking", "checkpoint"), action="append")
    parser.add_argument("--profiles", default="h200,l4", help="GPU profiles of the masking part")
    parser.add_argument("--checkpoint-modes", default="sync,async")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--scratch", default=tempfile.gettempdir(), help="where checkpoints are written (a local disk)")
    args = parser.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for part in args.part or ["masking", "checkpoint"]:
        rows = (masking(device, args.warmup, args.steps, tuple(args.profiles.split(","))) if part == "masking"
                else checkpoint(device, args.steps, args.scratch, tuple(args.checkpoint_modes.split(","))))
        meta = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__}
        Path(args.out, f"sft-{part}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
