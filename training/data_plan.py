"""The data plan: which worker reads which packed block, in which step.

Ray Train does not split the datasets (train.fit: DataConfig(datasets_to_split=[])): its split is
equal=True (ray/train/_internal/data_config.py), which drops blocks to give every worker as many, and
gives each world size other rows. Every worker reads the whole stream instead and keeps its share:
training, its rows of each global micro-batch, so a step holds the same rows on any number of workers;
validation, every world-th micro-batch, so every block is evaluated exactly once.

Training reads one continuous stream: epoch after epoch, each in its own order, with no row dropped at an
epoch's end (torchtitan's infinite loop over the data; a step may hold the last rows of one epoch and the first
of the next). Global row k is then the same on any number of workers for the whole run; grouping each epoch
into global micro-batches of its own would drop N mod (workers x micro-batch) rows per epoch, a number that
changes with the workers, and move every later epoch's rows.
Validation is the first `blocks` blocks of its stream, a number fixed by the run's first attempt
(training.validation_set), so a resumed attempt on another number of workers evaluates the same blocks.
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
                     blocks: int) -> tuple[list[dict[str, np.ndarray]], bool]:
    """Validation: the first `blocks` rows in micro-batches (the last one possibly short), rank r keeping every
    world-th from the r-th, so every block is evaluated exactly once over the workers whatever their number.
    Also whether the pass is whole (the stream held no more rows)."""
    taken = list(itertools.islice(iter(rows), blocks + 1))
    whole = len(taken) <= blocks
    taken = taken[:blocks]
    groups = [taken[i:i + micro_batch] for i in range(0, len(taken), micro_batch)]
    return [_stacked(group) for group in groups[rank::world]], whole


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


def stream_rows(dataset, shuffle_seed: int | None = None) -> Iterator[dict]:
    """The training stream: every epoch's rows (epoch_rows), one epoch after the other, for ever."""
    for epoch in itertools.count():
        produced = False
        for row in epoch_rows(_windows(dataset), shuffle_seed, epoch):
            produced = True
            yield row
        if not produced:
            raise RuntimeError("--data: the dataset yields no block; use more text or a smaller --seq-len")


def dataset_batches(dataset, micro_batch: int, position: int = 0, shuffle_seed: int | None = None,
                    rank: int = 0, world: int = 1) -> Iterator[dict[str, torch.Tensor]]:
    """This worker's training micro-batches from the whole stream (a Ray DataIterator), skipping the
    `position` micro-steps already consumed (position x world x micro_batch global rows; stream_rows, worker_share)."""
    rows = itertools.islice(stream_rows(dataset, shuffle_seed), position * world * micro_batch, None)
    for batch in worker_share(rows, micro_batch, rank, world):
        yield host_tensors(batch)


def dataset_pass(dataset, micro_batch: int, blocks: int, rank: int = 0,
                 world: int = 1) -> tuple[list[dict[str, torch.Tensor]], bool]:
    """This worker's share of the first `blocks` blocks of the validation stream (validation_share), as host tensors."""
    mine, whole = validation_share(epoch_rows(_windows(dataset), None, 0), micro_batch, rank, world, blocks)
    return [host_tensors(batch) for batch in mine], whole


def empty_batch(seq_len: int) -> dict[str, torch.Tensor]:
    """A one-block micro-batch with nothing to learn: a worker whose shard ran out still joins each
    forward's collectives, and adds nothing to the loss or the count."""
    return {"input_ids": torch.zeros((1, seq_len), dtype=torch.int64),
            "labels": torch.full((1, seq_len), IGNORE_INDEX, dtype=torch.int64),
            "position_ids": torch.arange(seq_len).unsqueeze(0)} | {k: torch.zeros(1, dtype=torch.int64) for k in BLOCK_COUNTS}
