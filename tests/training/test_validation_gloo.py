"""A validation split that does not divide among the workers, on 2 gloo workers: five documents, each filling a block
of its own, in micro-batches of 2 (the last one short). The first worker evaluates three blocks in two micro-batches,
the second two in one; it pads with an empty one, since both must run the same number of forwards (each gathers the
sharded weights: a forward fewer would hang the other). Every block is evaluated once over the two, as the run's
counts and the loss's target count say."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.data import pack
from tests.process_group import leave, spawn

SEQ_LEN = 16
DOCUMENTS = (9, 10, 11, 12, 13)
"""Token counts: each over half of a block, so each document is a block of its own."""


class Shard:
    """What ray.train.get_dataset_shard("validation") hands a worker: the whole packed split, in windows of rows."""

    def __init__(self, blocks: dict[str, np.ndarray]) -> None:
        self.blocks = blocks

    def iter_batches(self, batch_size: int, batch_format: str):
        assert batch_format == "numpy"
        yield self.blocks


def _run(rank: int, world: int, store: str, out: str) -> None:
    import ray.train

    from training.model import build_model
    from training.step import evaluate
    from training.validation_set import validation_batches

    # A forward one worker lacks would wait on the other for gloo's 30 minutes: a minute says as much.
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    torch.set_num_threads(1)
    device = torch.device("cpu")
    # Real data with a built-in model: the shard below stands for the tokenized split (validate() would ask for a
    # tokenizer).
    cfg = TrainConfig(model="tiny", data="train.jsonl", val_data="validation.jsonl", seq_len=SEQ_LEN, micro_batch=2,
                      workers=world, seed=1)
    blocks = pack([(list(range(1, 1 + n)), [True] * n, False) for n in DOCUMENTS], SEQ_LEN, 0)
    ray.train.get_dataset_shard = lambda name: Shard(blocks)
    model = build_model(cfg, device, rank, world)
    held, counts = validation_batches(cfg, model.config.vocab_size, rank, world, device, blocks=len(DOCUMENTS))
    real = sum(int((batch["real_tokens"] > 0).sum()) for batch in held)
    loss, targets = evaluate(model, held, device)
    found: list = [None] * world
    dist.all_gather_object(found, {"forwards": len(held), "blocks": real})
    if rank == 0:
        torch.save({"ranks": found, "counts": counts, "loss": loss, "targets": targets}, out)
    leave()


def test_every_validation_block_is_evaluated_once_over_workers_that_hold_different_numbers(tmp_path):
    out = tmp_path / "validation.pt"
    spawn(_run, args=(2, str(tmp_path / "store"), str(out)), nprocs=2)
    found = torch.load(out)
    assert found["ranks"] == [{"forwards": 2, "blocks": 3}, {"forwards": 2, "blocks": 2}]
    # A document of n tokens has n - 1 targets: its last token predicts nothing.
    targets = sum(n - 1 for n in DOCUMENTS)
    assert found["counts"] == {"blocks": 5, "documents": 5, "targets": targets, "whole": True}
    assert found["targets"] == targets and np.isfinite(found["loss"])
