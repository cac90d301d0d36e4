"""training.worker.prepare_training's wiring: the optimizer gets the run's learning rate and weight decay each in its
place, the random generators are seeded with the run's seed and this rank, and a checkpoint's step and data
position come back in that order."""

from __future__ import annotations

import pytest
import torch

from training import worker
from training.config import TrainConfig

CPU = torch.device("cpu")


@pytest.fixture
def built(monkeypatch):
    """prepare_training on a tiny model (a weight that decays, a bias that does not), recording what it calls."""
    calls: dict = {}
    model = torch.nn.Linear(3, 2)

    def build_model(*args, **kwargs):
        calls["build"] = args
        return model

    monkeypatch.setattr("training.model.build_model", build_model)
    monkeypatch.setattr("training.checkpoint.seed_rank", lambda *args: calls.setdefault("seed", args))

    def load(*args):
        calls["load"] = args
        return 40, 640  # (step, data position), as training.checkpoint.load returns them

    monkeypatch.setattr("training.checkpoint.load", load)
    return calls, model


def test_the_optimizer_gets_the_runs_learning_rate_and_its_weight_decay_on_the_weights_only(built):
    # Two values that differ by orders of magnitude: swapped, the weights would decay by 3e-4 at a rate of 0.1.
    cfg = TrainConfig(lr=3e-4, weight_decay=0.1)
    _, optimizer, _, _ = worker.prepare_training(cfg, CPU, 0, 1)
    assert [(g["lr"], g["weight_decay"], [p.ndim for p in g["params"]]) for g in optimizer.param_groups] == [
        (3e-4, 0.1, [2]), (3e-4, 0.0, [1])]


def test_each_rank_is_seeded_with_the_runs_seed_and_its_own_rank(built):
    calls, _ = built
    worker.prepare_training(TrainConfig(seed=7), CPU, 3, 4)
    assert calls["seed"] == (7, 3)
    assert calls["build"][2:4] == (3, 4)  # the model is built for this rank of this world


def test_a_fresh_run_starts_at_step_0_and_a_resumed_one_at_its_checkpoints_step_and_position(built, tmp_path):
    calls, model = built
    assert worker.prepare_training(TrainConfig(), CPU, 0, 1)[2:] == (0, 0)
    assert "load" not in calls
    _, optimizer, step, position = worker.prepare_training(TrainConfig(), CPU, 1, 2, checkpoint=tmp_path)
    assert (step, position) == (40, 640)
    assert calls["load"] == (tmp_path, model, optimizer, 1)
