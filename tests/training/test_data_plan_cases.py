"""Cases of training.data_plan that hold both sides of each choice: the per-epoch order (seed 0, the default, shuffles;
each epoch and each window has its own order; validation is never shuffled), an empty stream, target id 0, and the
padding batch of a worker whose validation share ran out."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from training import data_plan
from training.data import model_inputs
from training.data_plan import dataset_pass, empty_batch, epoch_rows, evaluated_counts, stream_rows
from training.loss import IGNORE_INDEX


class Stream:
    """Rows 0..count-1 as a Ray DataIterator hands them over (iter_batches of numpy arrays)."""

    def __init__(self, count: int):
        self.rows = np.arange(count)

    def iter_batches(self, batch_size: int, batch_format: str):
        for start in range(0, len(self.rows), batch_size):
            yield {"block": self.rows[start:start + batch_size]}


def order(rows) -> list[int]:
    return [int(row["block"]) for row in rows]


def windows(count: int, size: int):
    return Stream(count).iter_batches(size, "numpy")


def test_seed_0_the_default_shuffles_each_epoch():
    # --seed defaults to 0 and --shuffle is on by default: 0 is a seed, not "no shuffle".
    assert order(epoch_rows(windows(16, 16), 0, 0)) != list(range(16))
    assert order(epoch_rows(windows(16, 16), None, 0)) == list(range(16))


def test_each_epoch_has_its_own_order():
    first, second = (order(epoch_rows(windows(16, 16), 17, epoch)) for epoch in (0, 1))
    assert sorted(first) == sorted(second) == list(range(16)) and first != second


def test_each_window_has_its_own_order():
    # Two windows of 16: seeded by the same (seed, epoch) alone, both would be permuted alike.
    rows = order(epoch_rows(windows(32, 16), 17, 0))
    assert sorted(rows[:16]) == list(range(16)) and sorted(rows[16:]) == list(range(16, 32))
    assert [r - 16 for r in rows[16:]] != rows[:16]


def test_the_stream_runs_epoch_after_epoch_each_in_its_own_order(monkeypatch):
    monkeypatch.setattr(data_plan, "SHUFFLE_WINDOW_BLOCKS", 8)
    rows = order(itertools.islice(stream_rows(Stream(8), 17), 24))
    epochs = [rows[i:i + 8] for i in range(0, 24, 8)]
    assert all(sorted(e) == list(range(8)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3


class EmptyStream(Stream):
    """A dataset of no block that fails when read a second time: a stream that kept looking would never end."""

    def __init__(self):
        super().__init__(0)
        self.reads = 0

    def iter_batches(self, batch_size: int, batch_format: str):
        self.reads += 1
        assert self.reads == 1, "the empty dataset was read again"
        return super().iter_batches(batch_size, batch_format)


def test_an_empty_dataset_is_refused_naming_the_setting():
    with pytest.raises(RuntimeError, match=r"^--data: the dataset yields no block; use more text or a smaller --seq-len$"):
        next(stream_rows(EmptyStream(), 0))


def test_validation_reads_its_first_blocks_in_stream_order(monkeypatch):
    # The validation set is the first blocks of its stream as stored: the same blocks at every evaluation and attempt.
    monkeypatch.setattr(data_plan, "SHUFFLE_WINDOW_BLOCKS", 8)
    mine, whole = dataset_pass(Stream(12), micro_batch=2, blocks=6)
    assert [batch["block"].tolist() for batch in mine] == [[0, 1], [2, 3], [4, 5]] and whole is False


def test_a_target_token_id_0_is_counted():
    # Token id 0 is a real token ('!' in GPT-2's vocabulary); only IGNORE_INDEX is no target.
    batch = {"labels": np.array([[0, 0, IGNORE_INDEX]]), "position_ids": np.array([[0, 1, 2]]),
             "real_tokens": np.array([3])}
    assert evaluated_counts([batch]) == {"blocks": 1, "documents": 1, "targets": 2}


def test_the_padding_batch_runs_plain_causal_attention_and_counts_nothing():
    # Positions 0..n-1 on its one row: the forward takes no position_ids (one document, no mask to build).
    batch = empty_batch(6)
    assert set(model_inputs(batch)) == {"input_ids", "labels"}
    assert evaluated_counts([{k: v.numpy() for k, v in batch.items()}]) == {"blocks": 0, "documents": 0, "targets": 0}
