"""benchmarks/bench_sft.py's wiring without a GPU: what the timing loop hands the trainer, and the masking grid."""

from __future__ import annotations

import types

import pytest
import torch

from benchmarks import bench_sft
from training.config import TrainConfig
from training.config_rules import validate


@pytest.fixture()
def trainer_calls(monkeypatch):
    """The trainer's build, optimizer and step replaced by recorders; a clock that advances 1 s per reading."""
    import training.metrics
    import training.model
    import training.step

    calls = {}
    clock = iter(range(100))
    monkeypatch.setattr(bench_sft, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    monkeypatch.setattr(training.model, "build_model", lambda *args, **kwargs: "model")
    monkeypatch.setattr(training.step, "make_optimizer", lambda *args: calls.setdefault("optimizer", args) and "opt")
    monkeypatch.setattr(training.step, "train_step",
                        lambda *args, **kwargs: calls.setdefault("step", (args, kwargs)) and types.SimpleNamespace(loss=1.0))
    monkeypatch.setattr(training.metrics, "model_flops_per_token", lambda model, seq_len: 1e9)
    return calls


@pytest.mark.parametrize("reshard", [True, False])
def test_time_training_steps_with_the_configs_optimizer_schedule_and_layout(trainer_calls, reshard):
    """make_optimizer(model, lr, weight_decay, device); train_step(..., grad_accum, grad_clip, lr, device,
    keep_weights_gathered=not reshard_after_forward): distinct values so a swap or a lost `not` shows."""
    cfg = validate(TrainConfig(model="tiny", data="random", seq_len=64, micro_batch=2, grad_accum=3, grad_clip=0.5,
                               lr=2e-4, weight_decay=0.05, reshard_after_forward=reshard, compile=False))
    batches, device = iter(()), torch.device("cpu")
    bench_sft.time_training(cfg, device, batches, warmup=1, steps=1)
    assert trainer_calls["optimizer"] == ("model", 2e-4, 0.05, device)
    args, kwargs = trainer_calls["step"]
    assert args == ("model", "opt", batches, 3, 0.5, 2e-4, device)
    assert kwargs == {"keep_weights_gathered": not reshard}


def test_masking_times_each_profile_with_both_attentions_on_causal_and_packed_batches(monkeypatch):
    """Packed rows get documents (position ids restarting per document), causal rows plain random tokens; each row
    runs its own profile's shape and its attention."""
    seen = []

    def time_training(cfg, device, batches, warmup, steps):
        made = list(batches)  # every step's batch is made before the clock starts
        seen.append((cfg.profile, cfg.attention, cfg.seq_len, cfg.micro_batch, "position_ids" in made[0],
                     tuple(made[0]["input_ids"].shape), len(made), warmup, steps))
        return {"step_time_s": 1.0}

    monkeypatch.setattr(bench_sft, "time_training", time_training)
    rows = bench_sft.masking(torch.device("cpu"), warmup=1, steps=2, profiles=("l4",))
    assert seen == [("l4", attention, 2048, 1, packed, (1, 2048), 3, 1, 2)
                    for attention in ("sdpa", "flex") for packed in (False, True)]
    assert [(r["attention"], r["data"], r["step_time_s"]) for r in rows] == [
        (a, d, 1.0) for a in ("sdpa", "flex") for d in ("causal", "packed")]
