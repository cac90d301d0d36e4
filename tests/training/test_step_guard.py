"""A step whose loss or gradient norm is not finite changes nothing: no update, no optimizer state."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.data import synthetic_batches
from training.model import build_model
from training.step import NonFiniteStep, evaluate, make_optimizer, on_host, skips_on_device, train_step
from tests.process_group import leave, spawn


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
        result["norm"] = train_step(model, optimizer, batches, grad_accum=2, grad_clip=1.0, lr=1e-3, device=device).grad_norm
    except NonFiniteStep as error:
        result["error"] = str(error)
    after = {k: v.full_tensor() for k, v in model.state_dict().items()}
    result["changed"] = sorted(k for k in before if not torch.equal(before[k], after[k]))
    result["optimizer_state"] = len(optimizer.state)
    result["grads_left"] = sum(p.grad is not None for p in model.parameters())
    torch.save(result, out)
    leave()


def run(tmp_path, poison: bool) -> dict:
    out = tmp_path / f"{poison}.pt"
    spawn(_run, args=(str(tmp_path / f"store-{poison}"), str(out), poison), nprocs=1)
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


# ------------------------------------------------------------------ the GPU's guard: fused AdamW skips on the device
# On GPU the optimizer is fused AdamW, launched before the host sees the step's loss and norm, with a found_inf
# flag; fused AdamW also runs on CPU, so the same path runs here, on FSDP2's DTensors, after a good step (so
# there are moments and a step count to keep).


def _run_fused(rank: int, store: str, out: str, poison: bool) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    device = torch.device("cpu")
    model = build_model(TrainConfig(model="tiny", seq_len=16, micro_batch=2, seed=3), device, 0, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    batches = synthetic_batches("pattern", 3, model.config.vocab_size, 16, 2, 0, 1)
    train_step(model, optimizer, batches, grad_accum=1, grad_clip=1.0, lr=1e-3, device=device)
    weights = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
    state = [{k: v.full_tensor().clone() if hasattr(v, "full_tensor") else v.clone() for k, v in s.items()}
             for s in optimizer.state.values()]
    if poison:
        model.register_forward_hook(lambda module, args, output: output * float("nan"))
    result = {"skips_on_device": skips_on_device(optimizer)}
    try:
        train_step(model, optimizer, batches, grad_accum=1, grad_clip=1.0, lr=1e-3, device=device)
    except NonFiniteStep as error:
        result["error"] = str(error)
    result["changed_weights"] = sum(not torch.equal(weights[k], v.full_tensor()) for k, v in model.state_dict().items())
    result["changed_state"] = sum(
        not torch.equal(before[k], v.full_tensor() if hasattr(v, "full_tensor") else v)
        for before, now in zip(state, optimizer.state.values()) for k, v in now.items())
    result["steps"] = sorted({float(s["step"]) for s in optimizer.state.values()})
    result["found_inf_left"] = hasattr(optimizer, "found_inf")
    torch.save(result, out)
    leave()


def run_fused(tmp_path, poison: bool) -> dict:
    out = tmp_path / f"fused-{poison}.pt"
    spawn(_run_fused, args=(str(tmp_path / f"store-fused-{poison}"), str(out), poison), nprocs=1)
    return torch.load(out)


def test_fused_adamw_skips_a_nan_step_on_the_device_leaving_weights_moments_and_count(tmp_path):
    result = run_fused(tmp_path, poison=True)
    assert result["skips_on_device"] and result["error"] == "loss nan / gradient norm nan is not finite"
    assert result["changed_weights"] == 0 and result["changed_state"] == 0
    assert result["steps"] == [1.0] and not result["found_inf_left"]


def test_fused_adamw_takes_a_finite_step(tmp_path):
    """The control: the same second step without the NaN moves weights, moments and the count (to 2)."""
    result = run_fused(tmp_path, poison=False)
    assert "error" not in result and result["changed_weights"] >= 10 and result["changed_state"] >= 20
    assert result["steps"] == [2.0] and not result["found_inf_left"]


def test_only_fused_optimizers_are_handed_found_inf():
    weight = torch.nn.Parameter(torch.ones(2))
    assert skips_on_device(torch.optim.AdamW([weight], fused=True))
    assert skips_on_device(torch.optim.SGD([weight], lr=0.1, fused=True))
    assert not skips_on_device(torch.optim.AdamW([weight]))  # foreach AdamW raises on found_inf
    assert not skips_on_device(torch.optim.SGD([weight], lr=0.1))


def _run_one_rank_infinite(rank: int, store: str, out: str, fused: bool) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    model = _Probe(offset=float("inf") if rank == 1 else 0.0)
    result = {}
    try:
        _step(model, fused=fused)
    except NonFiniteStep as error:
        result["error"] = str(error)
    result["w"] = model.w.tolist()
    torch.save(result, f"{out}.{rank}")
    leave()


@pytest.mark.parametrize("fused", [False, True], ids=["host-decided update", "fused update told on the device"])
def test_an_infinite_loss_on_one_worker_stops_every_worker_before_the_update(tmp_path, fused):
    """Rank 1's loss alone is infinite; both gradients and the norm are finite. Were the flag each rank's own,
    rank 0 would step and the replicas part ways: whether the host decides the update (plain SGD) or the
    device does (fused SGD, launched before the host has read the flag)."""
    out = str(tmp_path / "one-rank")
    spawn(_run_one_rank_infinite, args=(str(tmp_path / "store-one-rank"), out, fused), nprocs=2)
    first, second = torch.load(f"{out}.0"), torch.load(f"{out}.1")
    assert first["error"].endswith("another worker's loss is not finite") and second["error"].startswith("loss inf")
    assert first["w"] == second["w"] == [1.0, 2.0]


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

    def set_reshard_after_backward(self, on: bool, *, recurse: bool = True) -> None:
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


def _step(model, grad_accum: int = 1, grad_clip: float = 0.0, fused: bool = False, **kwargs):
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0, fused=fused)  # train_step sets the step's own rate, 0.5
    return train_step(model, optimizer, _batches(), grad_accum=grad_accum, grad_clip=grad_clip, lr=0.5,
                      device=torch.device("cpu"), **kwargs)


def test_an_infinite_loss_with_a_finite_gradient_stops_the_step():
    """The loss alone is not finite (the gradient is [0.5, 0.5]): still no update."""
    model = _Probe(offset=float("inf"))
    with pytest.raises(NonFiniteStep, match=r"^loss inf / gradient norm 0\.707106\d* is not finite$"):
        _step(model)
    assert model.w.tolist() == [1.0, 2.0] and model.w.grad is None


def test_a_nan_gradient_with_a_finite_loss_stops_the_step():
    model = _Probe(grad=float("nan"))
    with pytest.raises(NonFiniteStep, match=r"^loss 1\.5 / gradient norm nan is not finite$"):
        _step(model)
    assert model.w.tolist() == [1.0, 2.0] and model.w.grad is None


def test_the_probe_steps_when_everything_is_finite():
    """The control. Loss: (1*1 + 2*1) / 2 valid targets = 1.5; gradient: [1, 1] / 2 = [0.5, 0.5];
    SGD at lr 0.5 moves w by -0.25 each: [0.75, 1.75]; the gradient norm is sqrt(0.5^2 * 2) = 0.7071."""
    model = _Probe()
    loss, norm, _ = _step(model)
    assert float(loss) == pytest.approx(1.5) and float(norm) == pytest.approx(0.5 ** 0.5)
    assert model.w.tolist() == pytest.approx([0.75, 1.75])
    assert model.w.grad is None  # the gradient's memory is given back after the update


def _weights_when_the_step_is_copied_and_read(monkeypatch, fused: bool) -> dict:
    import training.step

    model, seen = _Probe(), {}

    def spying(values):
        seen["copied"] = model.w.tolist()
        wait = on_host(values)
        return lambda: seen.setdefault("read", model.w.tolist()) and wait()

    monkeypatch.setattr(training.step, "on_host", spying)
    train_step(model, torch.optim.SGD(model.parameters(), lr=1.0, fused=fused), _batches(), grad_accum=1,
               grad_clip=0.0, lr=0.5, device=torch.device("cpu"))
    return seen


def test_a_fused_update_is_launched_between_the_copy_of_the_steps_numbers_and_their_read(monkeypatch):
    """On the GPU the update then runs while the host reads the loss and starts the next step, and the numbers
    copied are the step's, not the update's. On CPU every op runs as it is launched, so the weights seen say
    what was launched: as they were (1, 2) when the numbers are copied; already updated at the read (0.75, 1.75:
    the probe's step) with fused SGD; still as they were with plain SGD, which waits for the host."""
    fused = _weights_when_the_step_is_copied_and_read(monkeypatch, fused=True)
    plain = _weights_when_the_step_is_copied_and_read(monkeypatch, fused=False)
    assert fused == {"copied": [1.0, 2.0], "read": pytest.approx([0.75, 1.75])}
    assert plain == {"copied": [1.0, 2.0], "read": [1.0, 2.0]}


class _Recording(_Probe):
    def __init__(self) -> None:
        super().__init__()
        self.sync, self.reshard = [], []

    def set_requires_gradient_sync(self, on: bool) -> None:
        self.sync.append(on)

    def set_reshard_after_backward(self, on: bool, *, recurse: bool = True) -> None:
        self.reshard.append((on, "every unit" if recurse else "the root"))


def test_gradients_are_reduced_once_after_the_last_micro_batch():
    """3 micro-batches: FSDP's sync is off, off, on; so is the reshard after backward, of the root alone (gathered
    once a step), or kept gathered, of every unit."""
    model = _Recording()
    _step(model, grad_accum=3)
    assert model.sync == [False, False, True]
    assert model.reshard == [(False, "the root"), (False, "the root"), (True, "the root")]
    model = _Recording()
    _step(model, grad_accum=3, keep_weights_gathered=True)
    assert model.sync == [False, False, True]
    assert model.reshard == [(False, "every unit"), (False, "every unit"), (True, "every unit")]


def test_a_step_of_two_micro_batches_is_their_mean_over_all_four_targets():
    """Each micro-batch: w.x = 3 over 2 targets; the step has 4 targets, so each contributes 3/4 and the loss is
    1.5 (not 0.75, the last micro-batch alone); the gradient [2, 2] / 4 = [0.5, 0.5] moves w by 0.25 at lr 0.5."""
    model = _Probe()
    loss, norm, _ = _step(model, grad_accum=2)
    assert float(loss) == pytest.approx(1.5) and float(norm) == pytest.approx(0.5 ** 0.5)
    assert model.w.tolist() == pytest.approx([0.75, 1.75])


def test_the_gradient_is_clipped_to_grad_clip_and_the_norm_reported_before_clipping():
    """Norm 0.7071 clipped to 0.25: the gradient becomes [0.17678, 0.17678] and lr 0.5 moves w by 0.08839."""
    model = _Probe()
    norm = _step(model, grad_clip=0.25).grad_norm
    assert float(norm) == pytest.approx(0.5 ** 0.5)
    assert model.w.tolist() == pytest.approx([1 - 0.25 / 2 ** 0.5 / 2, 2 - 0.25 / 2 ** 0.5 / 2], rel=1e-5)


def test_a_step_with_a_single_target_divides_by_one():
    """One valid target (the other is ignored): the loss is w.x itself, 3.0."""
    from training.step import step_loss_scale

    batch = {"input_ids": torch.tensor([[1, 1]]), "labels": torch.tensor([[5, -100]])}
    assert float(step_loss_scale([batch], torch.device("cpu"))[0]) == 1.0
    assert float(step_loss_scale([dict(batch, labels=torch.tensor([[-100, -100]]))], torch.device("cpu"))[0]) == 1.0


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


def test_the_optimizer_decays_matrices_only_and_leaves_frozen_weights_out():
    """AdamW (betas 0.9/0.95, eps 1e-8) at the given rate; weight decay on 2-D weights only (not biases or
    norms); a frozen weight (LoRA's base) gets no optimizer state at all."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    model[2].weight.requires_grad_(False)
    optimizer = make_optimizer(model, 3e-4, 0.1, torch.device("cpu"))
    assert isinstance(optimizer, torch.optim.AdamW)
    decay, no_decay = optimizer.param_groups
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 3])] and decay["weight_decay"] == 0.1
    assert [p.shape for p in no_decay["params"]] == [torch.Size([4]), torch.Size([4]), torch.Size([4]), torch.Size([2])]
    assert no_decay["weight_decay"] == 0.0
    for group in (decay, no_decay):
        assert (group["lr"], group["betas"], group["eps"], group["fused"]) == (3e-4, (0.9, 0.95), 1e-8, False)


def _two_rank_evaluation(rank: int, store: str, out: str) -> None:
    import json

    from training.data_plan import empty_batch
    from training.step import evaluate

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    batch = lambda labels: {"input_ids": torch.zeros(1, 4, dtype=torch.long), "labels": torch.tensor([labels])}  # noqa: E731
    if rank == 0:
        batches = [batch([1, 2, 3, -100]), batch([10, -100, -100, -100])]
    else:  # a shorter shard, padded as validation_batches pads it
        batches = [batch([4, 5, -100, -100]), empty_batch(4)]
    result = evaluate(_SummedLabels(), batches, torch.device("cpu"))
    (Path(out) / f"{rank}.json").write_text(json.dumps(result))
    leave()


def test_validation_over_two_workers_is_the_mean_over_all_their_targets_and_padding_adds_nothing(tmp_path):
    """Worker 0: targets 1, 2, 3 and 10; worker 1: 4 and 5, then an empty batch (its shard ran out). Both report
    (1 + 2 + 3 + 10 + 4 + 5) / 6 = 25 / 6 = 4.1667: the padding counts no target (6, not 6 + 4), and no worker
    divides by its own count (16 / 4 = 4.0 and 9 / 2 = 4.5)."""
    import json

    spawn(_two_rank_evaluation, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        loss, count = json.loads((tmp_path / f"{rank}.json").read_text())
        assert (loss, count) == (pytest.approx(25 / 6), 6)


# ------------------------------------------------------------------ on a GPU: the step waits for its own numbers only
# Skipped without CUDA; run on the GPU machine (docs/benchmarks.md, "Correctness on the GPU machine").
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _half_a_second_of_gpu_work() -> None:
    torch.cuda._sleep(int(0.5 * torch.cuda.get_device_properties(0).clock_rate * 1e3))  # clock_rate is in kHz


@cuda
def test_the_steps_read_waits_for_its_copy_not_for_work_queued_after_it():
    """Numbers copied, then 0.5 s of work queued behind them: the read returns them before that work is done."""
    import time

    values = torch.tensor([1.5, 0.0, 0.25], device="cuda", dtype=torch.float64)
    torch.cuda.synchronize()
    read = on_host(values * 2)
    _half_a_second_of_gpu_work()
    started = time.perf_counter()
    numbers = read()
    waited = time.perf_counter() - started
    still_busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert numbers == [3.0, 0.0, 0.5] and waited < 0.1 and still_busy


@cuda
def test_starting_the_copy_does_not_wait_for_the_work_queued_before_it():
    """0.5 s of work queued, then the copy started: starting it returns at once (a copy to pageable memory would
    wait for the queue there), and only the read waits for the work ahead of the copy."""
    import time

    values = torch.tensor([1.5, 0.0, 0.25], device="cuda", dtype=torch.float64)
    torch.cuda.synchronize()
    _half_a_second_of_gpu_work()
    started = time.perf_counter()
    read = on_host(values)
    starting = time.perf_counter() - started
    numbers = read()
    reading = time.perf_counter() - started - starting
    assert numbers == [1.5, 0.0, 0.25] and starting < 0.1 and reading > 0.3


def _run_without_syncs(rank: int, store: str, out: str) -> None:
    """Three steps of the tiny model on one GPU, on blocks of two packed documents; the third under CUDA's sync
    check, which raises on any blocking read of the device (an .item(), a bool(), a .cpu()) made by the step: the
    forward, the document masks, the counts."""
    from training.metrics import DataCounts

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    device = torch.device("cuda", 0)
    model = build_model(TrainConfig(model="tiny", seq_len=16, micro_batch=2, seed=3, compile=False), device, 0, 1)
    optimizer = make_optimizer(model, 1e-3, 0.1, device)
    counts = DataCounts()
    two_documents = torch.cat([torch.arange(8), torch.arange(8)]).expand(2, -1)  # each row packs two documents
    batches = counts.counted(dict(b, position_ids=two_documents)
                             for b in synthetic_batches("pattern", 3, model.config.vocab_size, 16, 2, 0, 1))
    result = {}
    for step in range(3):
        if step == 2:
            torch.cuda.set_sync_debug_mode("error")
        try:
            result["loss"] = train_step(model, optimizer, batches, grad_accum=2, grad_clip=1.0, lr=1e-3, device=device,
                                        count=counts.drain).loss
        except RuntimeError as error:
            result["error"] = str(error)
            break
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.save(result, out)
    leave()


@cuda
def test_a_training_step_makes_no_blocking_read_of_the_gpu(tmp_path):
    out = tmp_path / "syncs.pt"
    spawn(_run_without_syncs, args=(str(tmp_path / "store-syncs"), str(out)), nprocs=1)
    result = torch.load(out)
    assert "error" not in result, result.get("error")
    assert result["loss"] > 0
