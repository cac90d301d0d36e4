"""The data plan, without Ray: every worker reads the whole packed stream and keeps its share.

Training: each optimizer step holds the same rows on 1, 2 and 4 workers (the global batch, world x
micro-batch x grad-accum rows, kept constant), epoch after epoch, on the chat corpus, also where the
workers x micro-batch differs (one continuous stream: no epoch drops rows that depend on it).
Validation: every block is evaluated exactly once over the workers, for any number of blocks >= 1; the set is
the first `blocks` blocks, whatever the workers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import DATA
from training import data_plan
from training.data import DataFormat, tokenize_and_pack
from training.data_plan import dataset_batches, evaluated_counts, validation_share
from training.loss import IGNORE_INDEX
from benchmarks.tiny_model import save_tiny_model

ROWS_PER_STEP, GRAD_ACCUM, EPOCHS = 8, 2, 2


class Stream:
    """The packed blocks as a Ray DataIterator hands them over (iter_batches), from numpy arrays."""

    def __init__(self, blocks: dict[str, np.ndarray]):
        self.blocks = blocks

    def iter_batches(self, batch_size: int, batch_format: str):
        assert batch_format == "numpy"
        size = len(self.blocks["input_ids"])
        for start in range(0, size, batch_size):
            yield {k: v[start:start + batch_size] for k, v in self.blocks.items()}


@pytest.fixture(scope="module")
def chat_blocks(tmp_path_factory) -> dict[str, np.ndarray]:
    """tests/data/chat.jsonl packed as the trainer's map_batches packs it (256 records a batch)."""
    model = save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", DATA / "chat.jsonl")
    records = [json.loads(line) for line in (DATA / "chat.jsonl").read_text().splitlines()]
    packed = [tokenize_and_pack({"messages": np.array([r["messages"] for r in records[i:i + 256]], dtype=object)},
                                model, 128, DataFormat()) for i in range(0, len(records), 256)]
    blocks = {k: np.concatenate([p[k] for p in packed]) for k in packed[0]}
    return blocks | {"block": np.arange(len(blocks["input_ids"]))}  # which block a row is, as it travels


def steps_read(blocks, world: int, seed: int | None, steps: int, grad_accum: int = GRAD_ACCUM) -> list[list[int]]:
    """The blocks of each optimizer step over all workers, micro-step by micro-step, in rank order."""
    micro_batch = ROWS_PER_STEP // (grad_accum * world)
    streams = [dataset_batches(Stream(blocks), micro_batch, shuffle_seed=seed, rank=r, world=world) for r in range(world)]
    read = []
    for _ in range(steps):
        rows = []
        for _ in range(grad_accum):
            for stream in streams:
                batch = next(stream)
                assert all(np.array_equal(ids, blocks["input_ids"][b]) for ids, b in zip(batch["input_ids"], batch["block"]))
                rows.extend(int(b) for b in batch["block"])
        read.append(rows)
    return read


def as_sets(steps: list[list[int]]) -> list[list[int]]:
    return [sorted(step) for step in steps]


@pytest.mark.parametrize("seed", [None, 17])
def test_every_step_holds_the_same_rows_on_1_2_and_4_workers(chat_blocks, monkeypatch, seed):
    monkeypatch.setattr(data_plan, "SHUFFLE_WINDOW_BLOCKS", 32)  # several windows, so that each is reordered on its own
    blocks = len(chat_blocks["input_ids"])
    steps = -(-EPOCHS * blocks // ROWS_PER_STEP)
    alone = steps_read(chat_blocks, 1, seed, steps)
    assert as_sets(steps_read(chat_blocks, 2, seed, steps)) == as_sets(alone)
    assert as_sets(steps_read(chat_blocks, 4, seed, steps)) == as_sets(alone)
    in_order = [b for step in alone for b in step]
    for epoch in range(EPOCHS):  # each epoch reads every block once, none left out at its end
        read = in_order[epoch * blocks:(epoch + 1) * blocks]
        assert len(set(read)) == len(read) == blocks


def test_the_steps_after_an_epoch_hold_the_same_rows_when_workers_x_micro_batch_differs(chat_blocks):
    """The global batch of 8 rows as 1 worker x 2 rows x 4 micro-steps, 2 x 2 x 2 and 4 x 2 x 1: each micro-step
    reads 2, 4 and 8 rows of the stream. The chat corpus packs into 148 blocks (148 = 2 x 74 = 4 x 37 = 8 x 18 + 4):
    grouping each epoch on its own, 4 workers would leave 4 rows at its end and 1 or 2 workers none, so from the
    second epoch on the steps would hold other rows on 4 workers. Over three epochs every step holds the same rows."""
    blocks = len(chat_blocks["input_ids"])
    assert blocks == 148
    steps = 3 * blocks // ROWS_PER_STEP
    alone = as_sets(steps_read(chat_blocks, 1, 17, steps, grad_accum=4))
    assert as_sets(steps_read(chat_blocks, 2, 17, steps, grad_accum=2)) == alone
    assert as_sets(steps_read(chat_blocks, 4, 17, steps, grad_accum=1)) == alone


def test_a_resume_on_two_workers_continues_the_stream_where_it_stopped():
    """Two workers x micro-batch 2 have consumed 3 micro-steps, global rows 0-11 (training.checkpoint.worker_position).
    Resumed there, rank 0 reads rows 12-13 and rank 1 rows 14-15: the fourth micro-step of the run never stopped."""
    blocks = {"input_ids": np.arange(40).reshape(20, 2), "block": np.arange(20)}
    resumed = [next(dataset_batches(Stream(blocks), 2, position=3, rank=rank, world=2))["block"].tolist()
               for rank in (0, 1)]
    assert resumed == [[12, 13], [14, 15]]


def rows(count: int) -> list[dict]:
    return [{"input_ids": np.full(4, i)} for i in range(count)]


def evaluated(count: int, world: int, micro_batch: int, blocks: int = 64) -> list[list[int]]:
    """The block ids each rank evaluates."""
    return [[int(r[0]) for batch in validation_share(rows(count), micro_batch, rank, world, blocks)[0]
             for r in batch["input_ids"]] for rank in range(world)]


@pytest.mark.parametrize("count", [1, 2, 3, 7])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_every_validation_block_is_evaluated_exactly_once(count, world):
    assert sorted(sum(evaluated(count, world, micro_batch=2), [])) == list(range(count))


def test_one_block_on_two_workers_is_evaluated_by_the_first():
    assert evaluated(1, world=2, micro_batch=4) == [[0], []]


def test_three_blocks_on_two_workers_one_at_a_time_all_count():
    assert evaluated(3, world=2, micro_batch=1) == [[0, 2], [1]]


def test_the_first_blocks_are_evaluated_whatever_the_workers_and_the_pass_says_whether_it_is_whole():
    """8 of 20 blocks: micro-batches of 2 go to 2 ranks in turn; on 4 ranks of 1, one block each in turn."""
    assert evaluated(20, world=2, micro_batch=2, blocks=8) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert evaluated(20, world=4, micro_batch=1, blocks=8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert evaluated(20, world=1, micro_batch=4, blocks=8) == [list(range(8))]
    assert validation_share(rows(20), 2, 0, 2, blocks=8)[1] is False
    assert validation_share(rows(8), 2, 0, 2, blocks=8)[1] is True


def test_evaluated_counts_read_blocks_documents_and_targets_from_the_block():
    # Two documents in the first block (positions restart at 3), one in the second, then padding.
    batch = {"labels": np.array([[5, 6, IGNORE_INDEX, 7, IGNORE_INDEX, IGNORE_INDEX],
                                 [8, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]]),
             "position_ids": np.array([[0, 1, 2, 0, 1, 0], [0, 1, 0, 1, 2, 3]]), "real_tokens": np.array([5, 2])}
    padding_only = {"labels": np.full((1, 6), IGNORE_INDEX), "position_ids": np.arange(6)[None], "real_tokens": np.array([0])}
    assert evaluated_counts([batch, padding_only]) == {"blocks": 2, "documents": 3, "targets": 4}
