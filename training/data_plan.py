"""The data plan: which worker reads which packed block, in which step.

Ray Train does not split the datasets (train.fit: DataConfig(datasets_to_split=[])): its split is
equal=True (ray/train/_internal/data_config.py), which drops blocks to give every worker as many, and
gives each world size other rows. Every worker reads the whole stream instead and keeps its share:
training, its rows of each global micro-batch, so a step holds the same rows on any number of workers;
validation, every world-th micro-batch, so every block is evaluated exactly once.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Iterator

import numpy as np
import torch

from training.data import BLOCK_COUNTS
from training.loss import IGNORE_INDEX

# Blocks reordered together each epoch: the packed blocks of several map batches (packing orders a
# batch's blocks longest first), about 25 MB at 4,096 tokens.
SHUFFLE_WINDOW_BLOCKS = 256


def epoch_rows(windows: Iterable[dict[str, np.ndarray]], shuffle_seed: int | None, epoch: int) -> Iterator[dict]:
    """One epoch's blocks, one at a time. The stream comes in windows of SHUFFLE_WINDOW_BLOCKS blocks (the
    last one shorter); with shuffle_seed each window is permuted by a generator seeded by (seed, epoch,
    window): a new order every epoch, the same on every worker, every world size and every replay."""
    for index, window in enumerate(windows):
        size = len(next(iter(window.values())))
        order = range(size) if shuffle_seed is None else \
            np.random.default_rng([shuffle_seed, epoch, index]).permutation(size)
        for i in order:
            yield {k: v[i] for k, v in window.items()}


def _stacked(rows: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([row[k] for row in rows]) for k in rows[0]}


def worker_share(rows: Iterable[dict], micro_batch: int, rank: int, world: int) -> Iterator[dict[str, np.ndarray]]:
    """Training: the rows taken world x micro_batch at a time (a global micro-batch), rank r keeping rows
    r*B ... r*B+B-1 of each; an incomplete last one is left out. One worker with micro-batch W*B thus
    reads exactly the union of what W workers with micro-batch B read, step by step."""
    group: list[dict] = []
    for row in rows:
        group.append(row)
        if len(group) == world * micro_batch:
            yield _stacked(group[rank * micro_batch:(rank + 1) * micro_batch])
            group = []


def validation_share(rows: Iterable[dict], micro_batch: int, rank: int, world: int,
                     limit: int) -> tuple[list[dict[str, np.ndarray]], bool]:
    """Validation: the rows in micro-batches (the last one possibly short), rank r keeping every world-th
    from the r-th, so every block is evaluated exactly once over the workers whatever their number; at most
    `limit` micro-batches a worker. Also whether the pass is whole (no micro-batch left out by the limit)."""
    mine, group, index = [], [], 0
    for row in itertools.chain(rows, [None]):
        if row is not None:
            group.append(row)
        if group and (len(group) == micro_batch or row is None):
            if index == limit * world:
                return mine, False
            if index % world == rank:
                mine.append(_stacked(group))
            group, index = [], index + 1
    return mine, True


def evaluated_counts(batches: list[dict]) -> dict[str, int]:
    """What a list of validation micro-batches holds: blocks (not padding), documents (a position 0 among a
    block's real tokens starts one) and target tokens."""
    counts = {"blocks": 0, "documents": 0, "targets": 0}
    for batch in batches:
        labels, positions, real = (np.asarray(batch[k]) for k in ("labels", "position_ids", "real_tokens"))
        for row in range(len(real)):
            counts["blocks"] += int(real[row] > 0)
            counts["documents"] += int((positions[row, :real[row]] == 0).sum())
        counts["targets"] += int((labels != IGNORE_INDEX).sum())
    return counts


def host_tensors(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """A micro-batch as tensors on the host: the trainer counts its tokens and targets there (train_step,
    DataCounts), where a GPU tensor would wait for the previous step's queued work; pinned where there
    is a GPU to copy them to without waiting."""
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}
    return {k: v.pin_memory() for k, v in tensors.items()} if torch.cuda.is_available() else tensors


def _windows(dataset) -> Iterator[dict[str, np.ndarray]]:
    return dataset.iter_batches(batch_size=SHUFFLE_WINDOW_BLOCKS, batch_format="numpy")


def dataset_batches(dataset, micro_batch: int, position: int = 0, shuffle_seed: int | None = None,
                    rank: int = 0, world: int = 1) -> Iterator[dict[str, torch.Tensor]]:
    """This worker's training micro-batches from the whole stream (a Ray DataIterator), skipping the
    `position` it already consumed; epochs repeat, each in its own order (epoch_rows, worker_share)."""
    consumed, epoch = 0, 0
    while True:
        produced = False
        for batch in worker_share(epoch_rows(_windows(dataset), shuffle_seed, epoch), micro_batch, rank, world):
            produced = True
            consumed += 1
            if consumed > position:
                yield host_tensors(batch)
        if not produced:
            raise RuntimeError("--data: the dataset yields no full micro-batch; use more text or a smaller --seq-len/--micro-batch")
        epoch += 1


def dataset_pass(dataset, micro_batch: int, limit: int, rank: int = 0,
                 world: int = 1) -> tuple[list[dict[str, torch.Tensor]], bool]:
    """This worker's share of one pass over the validation stream (validation_share), as host tensors."""
    mine, whole = validation_share(epoch_rows(_windows(dataset), None, 0), micro_batch, rank, world, limit)
    return [host_tensors(batch) for batch in mine], whole


def empty_batch(seq_len: int) -> dict[str, torch.Tensor]:
    """A one-block micro-batch with nothing to learn: a worker whose shard ran out still joins each
    forward's collectives, and adds nothing to the loss or the count."""
    return {"input_ids": torch.zeros((1, seq_len), dtype=torch.int64),
            "labels": torch.full((1, seq_len), IGNORE_INDEX, dtype=torch.int64),
            "position_ids": torch.arange(seq_len).unsqueeze(0)} | {k: torch.zeros(1, dtype=torch.int64) for k in BLOCK_COUNTS}
