"""Data order: records shuffled across files before packing (seeded, the same on every execution),
blocks reordered each epoch (a new order every epoch, replayed exactly from a position), and
validation read once, every block counted once, short shards included."""

from __future__ import annotations

import json

import numpy as np
import pytest
import ray
import torch
import torch.distributed as dist

from tests.conftest import DATA, local_ray
from training.config import TrainConfig
from training.data import DataFormat, dataset_batches, dataset_pass, packed_dataset
from benchmarks.tiny_model import save_tiny_model


@pytest.fixture(scope="module", autouse=True)
def ray_for_the_module():
    yield from local_ray(2)


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    """A folder of two JSONL files, each sorted by its source: A000..A059, then B000..B059."""
    folder = tmp_path_factory.mktemp("sorted")
    for name in "AB":
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"text": f"{name}{i:03d}"}) + "\n" for i in range(60)))
    return folder


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", DATA / "chat.jsonl")


def block_documents(dataset, model_folder) -> list[list[str]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    blocks = dataset.take_all()
    texts = [tokenizer.decode(b["input_ids"]) for b in blocks]
    return [[d for d in t.split("<|endoftext|>") if d] for t in texts]


def packed(folder, model_folder, seed):
    return packed_dataset(str(folder), model_folder, 32, DataFormat(), None, shuffle_seed=seed)


def test_records_are_shuffled_across_files_before_packing(two_files, model_folder):
    first_blocks = block_documents(packed(two_files, model_folder, seed=3), model_folder)[:4]
    sources = {doc[0] for block in first_blocks for doc in block}
    assert sources == {"A", "B"}, first_blocks


def test_the_shuffle_is_the_same_on_every_execution(two_files, model_folder):
    dataset = packed(two_files, model_folder, 3)  # one Dataset, executed twice: epochs and resumes do that
    assert block_documents(dataset, model_folder) == block_documents(dataset, model_folder)


def test_another_seed_gives_another_order(two_files, model_folder):
    assert block_documents(packed(two_files, model_folder, 3), model_folder) != \
        block_documents(packed(two_files, model_folder, 4), model_folder)


def test_no_shuffle_keeps_file_order(two_files, model_folder):
    first_blocks = block_documents(packed(two_files, model_folder, seed=None), model_folder)[:4]
    assert {doc[0] for block in first_blocks for doc in block} == {"A"}, first_blocks


ROWS = 600


def row_ids(shard, count: int, **kwargs) -> list[int]:
    stream = dataset_batches(shard, micro_batch=1, **kwargs)
    return [int(next(stream)["id"][0]) for _ in range(count)]


@pytest.fixture(scope="module")
def shard():
    return ray.data.from_items([{"id": i} for i in range(ROWS)]).iterator()


def test_batches_stay_on_the_host_inside_a_train_worker(shard, monkeypatch):
    """In a Ray Train worker Ray Data would put batches on the worker's device (its "auto"); here that device is
    "meta", so a batch left to the default would come back there. The trainer's counts read batches on the host."""
    import ray.train.torch
    import ray.train.utils

    monkeypatch.setattr(ray.train.utils, "_in_ray_train_worker", lambda: True)
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("meta"))
    assert next(iter(shard.iter_torch_batches(batch_size=1)))["id"].device.type == "meta"  # the default, to undo
    assert next(dataset_batches(shard, micro_batch=1))["id"].device.type == "cpu"
    assert dataset_pass(shard, micro_batch=1, limit=1)[0]["id"].device.type == "cpu"  # validation's


def test_each_epoch_has_its_own_order_of_every_block(shard):
    ids = row_ids(shard, 2 * ROWS, shuffle_seed=11)
    first, second = ids[:ROWS], ids[ROWS:]
    assert sorted(first) == sorted(second) == list(range(ROWS))
    assert first != list(range(ROWS)) and second != first


def test_a_resumed_position_replays_the_same_order(shard):
    whole = row_ids(shard, 2 * ROWS, shuffle_seed=11)
    assert row_ids(shard, 2 * ROWS - 700, shuffle_seed=11, position=700) == whole[700:]


def test_workers_order_their_shards_differently(shard):
    assert row_ids(shard, 100, shuffle_seed=11, rank=0) != row_ids(shard, 100, shuffle_seed=11, rank=1)


def test_without_a_seed_blocks_come_in_order(shard):
    assert row_ids(shard, ROWS + 5) == list(range(ROWS)) + list(range(5))


# ---------------------------------------------------------------- validation reads each block once


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def validation_with(monkeypatch, rows: int, micro_batch: int, eval_batches: int) -> list[dict]:
    from training.train import validation_batches

    shard = ray.data.from_items([{"input_ids": np.full(8, i), "labels": np.full(8, i)} for i in range(rows)]).iterator()
    monkeypatch.setattr(ray.train, "get_dataset_shard", lambda name: shard, raising=False)
    cfg = TrainConfig(model="folder", data="data.jsonl", val_fraction=0.1, micro_batch=micro_batch,
                      eval_batches=eval_batches, seq_len=8)
    return validation_batches(cfg, 512, 0, 1, torch.device("cpu"))


def test_validation_counts_every_block_once(monkeypatch, one_rank_group):
    held = validation_with(monkeypatch, rows=5, micro_batch=2, eval_batches=16)
    seen = [int(row[0]) for batch in held for row in batch["input_ids"]]
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_a_validation_shard_smaller_than_a_micro_batch_is_evaluated(monkeypatch, one_rank_group):
    held = validation_with(monkeypatch, rows=3, micro_batch=4, eval_batches=16)
    assert [batch["input_ids"].shape[0] for batch in held] == [3]


def test_eval_batches_caps_the_pass(monkeypatch, one_rank_group):
    held = validation_with(monkeypatch, rows=50, micro_batch=2, eval_batches=4)
    assert [int(row[0]) for batch in held for row in batch["input_ids"]] == list(range(8))


def test_an_empty_validation_split_is_refused(monkeypatch, one_rank_group):
    with pytest.raises(RuntimeError, match=r"--val-fraction: the validation split holds no block"):
        validation_with(monkeypatch, rows=0, micro_batch=2, eval_batches=4)
