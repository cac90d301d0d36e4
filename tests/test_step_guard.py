"""A step whose loss or gradient norm is not finite changes nothing: no update, no optimizer state."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training.config import TrainConfig
from training.data import synthetic_batches
from training.model import build_model
from training.step import NonFiniteStep, make_optimizer, train_step


def _run(rank: int, store: str, out: str, poison: bool) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    device = torch.device("cpu")
    model = build_model(TrainConfig(model="tiny", seq_len=16, micro_batch=2, seed=3), device, 0, 1)
    optimizer = make_optimizer(model, 1e-3, 0.1, device)
    batches = synthetic_batches("pattern", 3, model.config.vocab_size, 16, 2, 0, 1)
    before = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    if poison:
        model.register_forward_hook(lambda module, args, output: output * float("nan"))
    result = {}
    try:
        loss, norm = train_step(model, optimizer, batches, grad_accum=2, grad_clip=1.0, lr=1e-3, device=device)
        result["norm"] = float(norm)
    except NonFiniteStep as error:
        result["error"] = str(error)
    after = {k: v.full_tensor() for k, v in model.state_dict().items()}
    result["changed"] = sorted(k for k in before if not torch.equal(before[k], after[k]))
    result["optimizer_state"] = len(optimizer.state)
    result["grads_left"] = sum(p.grad is not None for p in model.parameters())
    torch.save(result, out)
    dist.destroy_process_group()


def run(tmp_path, poison: bool) -> dict:
    out = tmp_path / f"{poison}.pt"
    mp.spawn(_run, args=(str(tmp_path / f"store-{poison}"), str(out), poison), nprocs=1)
    return torch.load(out)


def test_nan_loss_stops_the_step_before_the_update(tmp_path):
    result = run(tmp_path, poison=True)
    assert result["error"] == "loss nan / gradient norm nan is not finite"
    assert result["changed"] == [] and result["optimizer_state"] == 0 and result["grads_left"] == 0


def test_a_finite_step_updates_every_weight(tmp_path):
    """The control: the same step without the NaN does update (so the test above can fail)."""
    result = run(tmp_path, poison=False)
    assert "error" not in result and result["norm"] > 0
    assert len(result["changed"]) >= 10 and result["optimizer_state"] > 0
