"""The fine-tuning benchmark's timing loop without a GPU: the trainer's step on packed documents, tiny model."""

from __future__ import annotations

import itertools
import math

import torch
import torch.multiprocessing as mp

from training import bench_sft
from training.config import TrainConfig, validate

TINY_VOCAB = 512


def _time_packed(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    from tests.process_group import leave

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    cfg = validate(TrainConfig(model="tiny", data="random", seq_len=64, micro_batch=2, grad_accum=1, compile=False))
    batches = iter(list(itertools.islice(bench_sft.packed_random_batches(0, TINY_VOCAB, 64, 2, median=16), 3)))
    torch.save(bench_sft.time_training(cfg, torch.device("cpu"), batches, warmup=1, steps=2), out)
    leave()


def test_time_training_reports_the_steps_loss_and_rates(tmp_path):
    """The row masking() prints: a positive step time and rates, and the last step's loss, which on random tokens
    is about ln(vocabulary) (a NameError here once turned every masking row into an error)."""
    out = tmp_path / "row.pt"
    mp.spawn(_time_packed, args=(str(tmp_path / "store"), str(out)), nprocs=1)
    row = torch.load(out)
    assert row["step_time_s"] > 0 and row["tokens_per_s_per_gpu"] > 0 and row["tflops_per_gpu"] > 0
    assert abs(row["final_loss"] - math.log(TINY_VOCAB)) < 0.5
