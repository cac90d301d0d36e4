"""Cases of training.validation_set on one gloo rank: the synthetic validation blocks are next-token pairs of their
stream and report no data counts, a run without validation data has none, and an empty validation split is refused
naming the option that gave it (--val-data or --val-fraction)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.data import VALIDATION_SEED_OFFSET, synthetic_block
from training.validation_set import validation_batches

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('group') / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_synthetic_validation_blocks_are_next_token_pairs_of_the_held_out_stream(one_rank_group):
    cfg = TrainConfig(data="pattern", val_fraction=0.1, micro_batch=2, eval_batches=2, seq_len=8, seed=3)
    held, counts = validation_batches(cfg, 97, 0, 1, CPU, blocks=4)
    assert counts is None  # data counts are those of real data
    assert [batch["input_ids"].shape for batch in held] == [(2, 8), (2, 8)]
    rows = [(ids, labels) for batch in held for ids, labels in zip(batch["input_ids"], batch["labels"])]
    for i, (ids, labels) in enumerate(rows):
        block = synthetic_block("pattern", 3 + VALIDATION_SEED_OFFSET, i, 97, 9)  # seq_len + 1 tokens
        assert torch.equal(ids, block[:-1]) and torch.equal(labels, block[1:])


def test_a_run_without_validation_data_has_no_validation_set():
    assert validation_batches(TrainConfig(data="random"), 97, 0, 1, CPU, blocks=4) == (None, None)


class EmptyShard:
    """A validation split of no block, as ray.train.get_dataset_shard("validation") would hand it over."""

    def iter_batches(self, batch_size: int, batch_format: str):
        return iter(())


@pytest.mark.parametrize("source, option", [({"val_data": "validation.jsonl"}, "--val-data"),
                                            ({"val_fraction": 0.1}, "--val-fraction")])
def test_an_empty_validation_split_is_refused_naming_its_option(one_rank_group, monkeypatch, source, option):
    import ray.train

    monkeypatch.setattr(ray.train, "get_dataset_shard", lambda name: EmptyShard(), raising=False)
    cfg = TrainConfig(model="folder", data="data.jsonl", seq_len=8, **source)
    with pytest.raises(RuntimeError, match=rf"^{option}: the validation split holds no block; give more validation data "
                                           r"or a larger --val-fraction$"):
        validation_batches(cfg, 97, 0, 1, CPU, blocks=4)


def test_the_first_attempt_sets_eval_batches_x_workers_x_micro_batch_blocks_and_a_later_one_reads_them(tmp_path):
    # Three factors that differ (3 x 2 x 5 = 30): a factor left out or repeated gives another number.
    from training.validation_set import fixed_blocks

    run = str(tmp_path / "run")
    assert fixed_blocks(run, eval_batches=3, world=2, micro_batch=5) == (30, "--eval-batches 3 x 2 workers x --micro-batch 5")
    assert fixed_blocks(run, eval_batches=7, world=4, micro_batch=1)[0] == 30


class ThreeBlockShard:
    """A validation split of three packed blocks of 4 tokens, each two documents ([0, 1, 0, 1]) and 3 targets."""

    def iter_batches(self, batch_size: int, batch_format: str):
        yield {"input_ids": np.zeros((3, 4), np.int64), "labels": np.array([[5, 6, -100, 7]] * 3),
               "position_ids": np.array([[0, 1, 0, 1]] * 3), "real_tokens": np.array([4, 4, 4]),
               "truncated": np.zeros(3, np.int64), "unlearned": np.zeros(3, np.int64)}


@pytest.mark.parametrize("blocks, counts", [
    (2, {"blocks": 2, "documents": 4, "targets": 6, "whole": False}),  # a third block is left out: not whole
    (3, {"blocks": 3, "documents": 6, "targets": 9, "whole": True}),
    (4, {"blocks": 3, "documents": 6, "targets": 9, "whole": True}),
])
def test_real_validation_data_reports_its_counts_and_whether_the_pass_is_whole(one_rank_group, monkeypatch, blocks,
                                                                                 counts):
    import ray.train

    monkeypatch.setattr(ray.train, "get_dataset_shard", lambda name: ThreeBlockShard(), raising=False)
    cfg = TrainConfig(model="folder", data="data.jsonl", seq_len=4, micro_batch=1, val_fraction=0.1)
    held, found = validation_batches(cfg, 97, 0, 1, CPU, blocks=blocks)
    assert found == counts and len(held) == counts["blocks"]
