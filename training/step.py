"""The optimizer, the learning-rate schedule and one training step: shared by train and bench."""

from __future__ import annotations

import math
from typing import Iterator

import torch
from torch import nn


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, device: torch.device) -> torch.optim.Optimizer:
    """AdamW on fp32 master weights; no decay on biases and norms; fused kernels on GPU."""
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")


def lr_at(step: int, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """The learning rate of optimizer step `step` (0 .. total-1): linear warmup that reaches the peak
    on step warmup-1, then cosine decay from the peak there (step 0 without warmup) to exactly
    min_ratio * peak on the last step, total-1. The peak is used once."""
    if warmup and step < warmup:
        return peak * (step + 1) / warmup
    start = warmup - 1 if warmup else 0
    progress = (step - start) / max(1, total - 1 - start)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


class NonFiniteStep(FloatingPointError):
    """The loss or the gradient norm of a step was NaN or infinite; the weights were not updated."""

    def __init__(self, loss: float, grad_norm: float) -> None:
        super().__init__(f"loss {loss} / gradient norm {grad_norm} is not finite")
        self.loss, self.grad_norm = loss, grad_norm


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterator[torch.Tensor],
               grad_accum: int, grad_clip: float, lr: float, device: torch.device,
               keep_weights_gathered: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step over grad_accum micro-batches; returns (this rank's loss, the global grad norm)
    as device tensors.

    keep_weights_gathered (with reshard_after_forward off): the layers' weights stay gathered
    from the first micro-batch's forward to the last one's backward, so a step all-gathers each
    layer once instead of twice per micro-batch; what a slow inter-node network needs.
    One host sync per step: before the update, the loss and the gradient norm must be finite, or
    NonFiniteStep is raised with the weights and the optimizer state untouched (a NaN step would
    otherwise poison every later step and checkpoint).
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss_sum = torch.zeros((), device=device)
    for micro in range(grad_accum):
        block = next(batches).to(device, non_blocking=True)
        last = micro == grad_accum - 1
        # FSDP2 reduce-scatters only after the last micro-batch's backward.
        model.set_requires_gradient_sync(last)
        if keep_weights_gathered:
            model.set_reshard_after_backward(last)
        loss = model(block[:, :-1], block[:, 1:]) / grad_accum
        loss.backward()
        loss_sum += loss.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else float("inf"))
    total_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    if not bool(torch.isfinite(total_norm) & torch.isfinite(loss_sum)):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteStep(float(loss_sum), float(total_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum, total_norm
