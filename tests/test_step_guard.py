"""A step whose loss or gradient norm is not finite changes nothing: no update, no optimizer state."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training.config import TrainConfig
from training.data import synthetic_batches
from training.model import build_model
from training.step import NonFiniteStep, evaluate, make_optimizer, train_step


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


# ------------------------------------------------------------------ the guard and evaluation, in one process
# A stand-in for the FSDP model (train_step and evaluate need only its forward and the two FSDP switches),
# so each case states its own loss and gradient exactly.


class _Probe(torch.nn.Module):
    """forward returns scale x (w . x summed over the batch) + `offset`; its gradient is scale x sum(x),
    unless `grad` overrides what backward hands to w."""

    def __init__(self, offset: float = 0.0, grad: float | None = None) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
        self.offset, self.grad = offset, grad

    def set_requires_gradient_sync(self, on: bool) -> None:  # FSDP2's switches: nothing to do on one process
        pass

    def set_reshard_after_backward(self, on: bool) -> None:
        pass

    def forward(self, input_ids, labels, scale=1.0):
        value = (self.w * input_ids.float().sum(0)).sum()
        if self.grad is not None:  # the same value, with a chosen gradient
            value = _WithGradient.apply(value, self.w, self.grad)
        return value * scale + self.offset


class _WithGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, weight, grad):
        ctx.shape, ctx.grad = weight.shape, grad
        return value.clone()

    @staticmethod
    def backward(ctx, upstream):
        return None, torch.full(ctx.shape, ctx.grad), None


def _batches():
    while True:  # 2 valid targets per micro-batch
        yield {"input_ids": torch.tensor([[1, 1]]), "labels": torch.tensor([[5, 6]])}


def _step(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    return train_step(model, optimizer, _batches(), grad_accum=1, grad_clip=0.0, lr=0.5, device=torch.device("cpu"))


def test_an_infinite_loss_with_a_finite_gradient_stops_the_step():
    """The loss alone is not finite (the gradient is [0.5, 0.5]): still no update."""
    model = _Probe(offset=float("inf"))
    with pytest.raises(NonFiniteStep):
        _step(model)
    assert model.w.tolist() == [1.0, 2.0]


def test_a_nan_gradient_with_a_finite_loss_stops_the_step():
    model = _Probe(grad=float("nan"))
    with pytest.raises(NonFiniteStep):
        _step(model)
    assert model.w.tolist() == [1.0, 2.0]


def test_the_probe_steps_when_everything_is_finite():
    """The control. Loss: (1*1 + 2*1) / 2 valid targets = 1.5; gradient: [1, 1] / 2 = [0.5, 0.5];
    SGD at lr 0.5 moves w by -0.25 each: [0.75, 1.75]; the gradient norm is sqrt(0.5^2 * 2) = 0.7071."""
    model = _Probe()
    loss, norm = _step(model)
    assert float(loss) == pytest.approx(1.5) and float(norm) == pytest.approx(0.5 ** 0.5)
    assert model.w.tolist() == pytest.approx([0.75, 1.75])


class _SummedLabels(torch.nn.Module):
    """A 'loss' that is the sum of the valid target ids: evaluation's arithmetic, checkable by hand."""

    def forward(self, input_ids, labels, position_ids=None, scale=1.0):
        return torch.where(labels != -100, labels, 0).sum().float()


def test_validation_loss_is_the_mean_over_valid_targets_only():
    """Two batches: targets 1, 2, 3 (one ignored) and 10 (three ignored): (1+2+3+10) / 4 targets = 4.0.
    Dividing by every label (8) would give 2.0."""
    batches = [{"input_ids": torch.zeros(1, 4, dtype=torch.long), "labels": torch.tensor([[1, 2, 3, -100]])},
               {"input_ids": torch.zeros(1, 4, dtype=torch.long), "labels": torch.tensor([[-100, -100, -100, 10]])}]
    assert evaluate(_SummedLabels(), batches, torch.device("cpu")) == (4.0, 4)
