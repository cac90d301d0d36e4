"""The optimizer and one training step (and evaluation): shared by train and bench."""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator, NamedTuple, Sequence

import torch
import torch.distributed as dist
from torch import nn

from training.data import model_inputs


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, device: torch.device) -> torch.optim.Optimizer:
    """AdamW on fp32 master weights; no decay on biases and norms; fused kernels on GPU. Frozen
    parameters (LoRA's base weights) get no optimizer state."""
    decay, no_decay = [], []
    for p in filter(lambda p: p.requires_grad, model.parameters()):
        (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")


class NonFiniteStep(FloatingPointError):
    """The loss or the gradient norm of a step was NaN or infinite; the weights were not updated."""

    def __init__(self, loss: float, grad_norm: float) -> None:
        where = "another worker's loss is not finite" if math.isfinite(loss) and math.isfinite(grad_norm) else "is not finite"
        super().__init__(f"loss {loss} / gradient norm {grad_norm} {where}")
        self.loss, self.grad_norm = loss, grad_norm


class StepResult(NamedTuple):
    """What a step reports, on the host: read before the update runs, so the GPU is not idle while it is read."""

    loss: float  # the step's mean loss over the valid targets of every worker
    grad_norm: float  # the global gradient norm, before clipping
    sums: tuple[float, ...] = ()  # the caller's per-step numbers (train_step's count), summed over every worker


def step_loss_scale(micro_batches: list[dict[str, torch.Tensor]], device: torch.device,
                    also: Sequence[float] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """(world size / valid targets of the whole step on every rank, `also` summed over the ranks), as device
    tensors, from one collective.

    Each rank's summed loss times the first, averaged over ranks by FSDP's gradient reduction, is the
    step's mean over its valid targets: every token counts the same, however the prompt masks and
    padding are spread over micro-batches and ranks. No host sync: the numbers stay on the device.
    """
    from training.loss import IGNORE_INDEX

    valid = sum(int((mb["labels"] != IGNORE_INDEX).sum()) for mb in micro_batches)  # host tensors: no sync
    numbers = torch.tensor([valid, *also], dtype=torch.float64).to(device, non_blocking=True)
    world = 1
    if dist.is_initialized():
        dist.all_reduce(numbers)
        world = dist.get_world_size()
    return (world / numbers[0].clamp(min=1)).float(), numbers[1:]


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterator[dict[str, torch.Tensor]],
               grad_accum: int, grad_clip: float, lr: float, device: torch.device,
               keep_weights_gathered: bool = False, count: Callable[[], Sequence[float]] | None = None,
               after_update: Callable[[nn.Module], None] | None = None) -> StepResult:
    """One optimizer step over grad_accum micro-batches.

    keep_weights_gathered (with reshard_after_forward off): the layers' weights stay gathered
    from the first micro-batch's forward to the last one's backward, so a step all-gathers each
    layer once instead of twice per micro-batch; what a slow inter-node network needs.
    count: called once the step's micro-batches are drawn; its numbers (this rank's data counts) come back
    in StepResult.sums, summed over the workers with the step's own numbers.
    after_update: launched right after the optimizer step (fp8: the next step's float8 weight scales).
    One host sync per step, and it waits for no more than the step's loss and gradient norm: they must be
    finite, or NonFiniteStep is raised with the weights and the optimizer state as they were (a NaN step
    would otherwise poison every later step and checkpoint). A fused optimizer is launched before that sync,
    told on the device to skip its update when they are not (found_inf): the GPU runs the update while the
    host reads the numbers and draws and launches the next step, and no forward reads anything back
    (training.model.attention_masks), so the GPU always has queued work.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    micro_batches = [next(batches) for _ in range(grad_accum)]
    scale, sums = step_loss_scale(micro_batches, device, count() if count else ())
    loss_sum = torch.zeros((), device=device)
    for micro, batch in enumerate(micro_batches):
        last = micro == grad_accum - 1
        # FSDP2 reduce-scatters only after the last micro-batch's backward.
        model.set_requires_gradient_sync(last)
        # The root (embedding, final norm) runs first in every forward: resharded after a backward, it would be
        # gathered again before the next micro-batch could start, with nothing to hide behind. Kept gathered until the
        # last backward, it is gathered once a step, at no extra peak memory (it is gathered in every micro-batch).
        model.set_reshard_after_backward(last, recurse=keep_weights_gathered)
        loss = model(**{k: v.to(device, non_blocking=True) for k, v in model_inputs(batch).items()}, scale=scale)
        loss.backward()
        loss_sum += loss.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else float("inf"))
    total_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    # [the step's loss summed over workers, workers whose loss or norm is not finite]: every rank skips, or none
    # (one rank's loss may be infinite while the global gradient norm is finite).
    shared = torch.stack([loss_sum, (~(torch.isfinite(total_norm) & torch.isfinite(loss_sum))).float()])
    world = 1
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(shared)
        world = dist.get_world_size()
    skip = shared[1] > 0
    numbers = on_host(torch.cat([shared.double(), torch.stack([total_norm, loss_sum]).double(), sums]))
    launched = skips_on_device(optimizer)
    if launched:
        with found_inf(optimizer, skip):
            optimizer.step()
        if after_update:
            after_update(model)
    summed_loss, skipping, norm, own_loss, *summed = numbers()  # the step's host sync
    if not skipping and not launched:
        optimizer.step()
        if after_update:
            after_update(model)
    optimizer.zero_grad(set_to_none=True)
    if skipping:
        raise NonFiniteStep(own_loss, norm)
    return StepResult(summed_loss / world, norm, tuple(summed))


def on_host(values: torch.Tensor) -> Callable[[], list[float]]:
    """Start copying `values` to the host; the returned call waits for that copy alone, not for the work
    launched after it (a pinned buffer and an event; .tolist() would wait for the whole queue)."""
    if values.device.type != "cuda":
        return values.tolist
    host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
    host.copy_(values, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(values.device))

    def wait() -> list[float]:
        copied.synchronize()
        return host.tolist()

    return wait


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer reads a found_inf tensor and, where it is non-zero, leaves weights, moments
    and step count as they were: the flag GradScaler checks before handing it one (torch/amp/grad_scaler.py;
    fused Adam, AdamW and SGD set it; torch/optim/adam.py, _fused_adam, skips the update on the device)."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


@contextlib.contextmanager
def found_inf(optimizer: torch.optim.Optimizer, skip: torch.Tensor):
    """The flag for one step: a 0-dim float32 tensor on the device, as the fused kernels read it (a bool or a
    shape [1] tensor is refused, the latter after the step count was already raised)."""
    optimizer.found_inf = skip.float()
    try:
        yield
    finally:
        del optimizer.found_inf


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[dict[str, torch.Tensor]], device: torch.device) -> tuple[float, int]:
    """(mean loss over the valid targets of every rank's batches, their count). Every rank must
    pass the same number of batches: each forward gathers the sharded weights."""
    from training.loss import IGNORE_INDEX

    totals = torch.zeros(2, device=device, dtype=torch.float64)
    model.eval()  # no dropout (LoRA's) in validation
    for batch in batches:
        totals[0] += model(**{k: v.to(device) for k, v in model_inputs(batch).items()}).double()
        totals[1] += (batch["labels"] != IGNORE_INDEX).sum().to(device)
    model.train()
    if dist.is_initialized():
        dist.all_reduce(totals)
    count = int(totals[1].item())
    return (totals[0] / max(count, 1)).item(), count
