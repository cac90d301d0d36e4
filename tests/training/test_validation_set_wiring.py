"""training.validation_set.validation_batches on a worker whose own share is empty while another worker's is not
(fewer validation micro-batches than workers): it pads, it does not refuse the run; and the refusal comes only when
no worker holds a block."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.validation_set import validation_batches

CPU = torch.device("cpu")


def other_worker_holds(monkeypatch, batches: int) -> None:
    """The all-reduces as over this worker and one other that holds `batches` synthetic micro-batches (no counts)."""
    def all_reduce(tensor, op=dist.ReduceOp.SUM):
        other = torch.zeros_like(tensor)
        other[0] = batches
        tensor.copy_(torch.maximum(tensor, other) if op == dist.ReduceOp.MAX else tensor + other)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)


def test_a_worker_whose_own_share_is_empty_pads_to_the_other_workers_batches(monkeypatch):
    # One block of one micro-batch over 2 workers: rank 0 holds it, rank 1 none; rank 1 must still run one
    # (empty) forward, since each forward gathers the sharded weights from every worker.
    other_worker_holds(monkeypatch, batches=1)
    cfg = TrainConfig(data="pattern", val_fraction=0.1, micro_batch=1, seq_len=8)
    held, counts = validation_batches(cfg, 97, rank=1, world=2, device=CPU, blocks=1)
    assert counts is None
    assert [batch["labels"].tolist() for batch in held] == [[[-100] * 8]]  # one block, nothing to learn


def test_no_block_on_any_worker_is_refused(monkeypatch):
    other_worker_holds(monkeypatch, batches=0)
    cfg = TrainConfig(data="pattern", val_fraction=0.1, micro_batch=1, seq_len=8)
    with pytest.raises(RuntimeError, match=r"^--val-fraction: the validation split holds no block"):
        validation_batches(cfg, 97, rank=1, world=2, device=CPU, blocks=1)


def test_a_worker_pads_to_the_most_batches_any_worker_holds_not_their_sum(monkeypatch):
    # Three blocks over 2 workers: rank 0 holds 2 micro-batches, rank 1 one real and one empty (2 forwards each).
    other_worker_holds(monkeypatch, batches=2)
    cfg = TrainConfig(data="pattern", val_fraction=0.1, micro_batch=1, seq_len=8)
    held, _ = validation_batches(cfg, 97, rank=1, world=2, device=CPU, blocks=3)
    assert [(batch["labels"] != -100).sum().item() for batch in held] == [8, 0]
