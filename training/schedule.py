"""The run's schedules: the learning rate (warmup, then cosine decay to a floor), and which steps write a record
and which evaluate."""

from __future__ import annotations

import math


def lr_at(step: int, peak: float, warmup: int, total: int, min_ratio: float) -> float:
    """The learning rate of optimizer step `step` (0 .. total-1): linear warmup that reaches the peak
    on step warmup-1, then cosine decay from the peak there (step 0 without warmup) to exactly
    min_ratio * peak on the last step, total-1. The peak is used once."""
    if warmup and step < warmup:
        return peak * (step + 1) / warmup
    start = warmup - 1 if warmup else 0
    progress = (step - start) / max(1, total - 1 - start)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def step_output(step: int, steps: int, log_every: int, eval_every: int, validating: bool) -> tuple[bool, bool]:
    """(whether step `step` of 1 .. steps writes its record, whether it evaluates first): a record every log_every
    steps and at the last; with validation data, an evaluation every eval_every steps (0: only at the last) and at
    the last, whatever log_every: its val_loss goes out in that step's record."""
    evaluating = validating and (step == steps or (eval_every > 0 and step % eval_every == 0))
    return evaluating or step % log_every == 0 or step == steps, evaluating
