"""The fine-tuning benchmark's timing loop without a GPU: the trainer's step on packed documents, tiny model."""

from __future__ import annotations

import itertools
import math
import types

import torch

from benchmarks import bench_sft
from training.config import TrainConfig
from training.config_rules import validate
from tests.process_group import spawn

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
    spawn(_time_packed, args=(str(tmp_path / "store"), str(out)), nprocs=1)
    row = torch.load(out)
    assert row["step_time_s"] > 0 and row["tokens_per_s_per_gpu"] > 0 and row["tflops_per_gpu"] > 0
    assert abs(row["final_loss"] - math.log(TINY_VOCAB)) < 0.5


class _Step:
    def __init__(self, loss: float) -> None:
        self.loss = loss


def test_time_training_times_the_steps_after_warm_up_by_their_median_and_keeps_the_last_loss(monkeypatch):
    """One warm-up step (its end not read), then timed steps of 1, 1 and 10 s, losses 1, 2, 3, 4: 4 steps run, the
    step time is the timed steps' median (1 s; their mean is 4), the loss the last one."""
    import training.metrics
    import training.model
    import training.step

    calls = []

    def step(*args, **kwargs):
        calls.append(1)
        return _Step(float(len(calls)))

    clock = iter([0.0, 10.0, 11.0, 20.0, 21.0, 30.0, 40.0])  # the warm-up's start, then each timed step's start and end
    monkeypatch.setattr(bench_sft, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    monkeypatch.setattr(training.model, "build_model", lambda *args, **kwargs: object())
    monkeypatch.setattr(training.step, "make_optimizer", lambda *args, **kwargs: object())
    monkeypatch.setattr(training.step, "train_step", step)
    monkeypatch.setattr(training.metrics, "model_flops_per_token", lambda model, seq_len: 1e9)
    cfg = validate(TrainConfig(model="tiny", data="random", seq_len=64, micro_batch=2, grad_accum=1, compile=False))
    row = bench_sft.time_training(cfg, torch.device("cpu"), iter(()), warmup=1, steps=3)
    assert len(calls) == 4
    assert row["step_time_s"] == 1.0 and row["tokens_per_s_per_gpu"] == 128.0
    assert row["final_loss"] == 4.0


def test_packed_batches_carry_each_rows_counts_and_move_on():
    """Each micro-batch has the model's inputs and the trainer's per-row counts (BLOCK_COUNTS, one per row): the
    documents fill a row from its start, the rest is padding with no target; the next batch holds other rows."""
    from training.data import BLOCK_COUNTS, IGNORE_INDEX

    batches = bench_sft.packed_random_batches(0, TINY_VOCAB, 64, 2, median=16)
    first, second = next(batches), next(batches)
    assert set(first) == {"input_ids", "labels", "position_ids", *BLOCK_COUNTS}
    for name in BLOCK_COUNTS:
        assert first[name].shape == (2,)
    for row, real in enumerate(first["real_tokens"].tolist()):
        assert 0 < real <= 64
        assert (first["labels"][row, real:] == IGNORE_INDEX).all() and (first["input_ids"][row, real:] == 0).all()
    assert not torch.equal(first["input_ids"], second["input_ids"])
