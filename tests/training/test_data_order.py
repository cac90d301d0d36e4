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
from training.data import DataFormat, packed_dataset
from training.data_plan import dataset_batches, dataset_pass
from benchmarks.tiny_model import save_tiny_model


pytestmark = pytest.mark.usefixtures("fewer_shuffle_blocks")


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


@pytest.fixture(scope="module")
def seed_3(two_files, model_folder):
    """One Dataset shuffled with seed 3 and its blocks from a first execution: each execution takes seconds."""
    dataset = packed(two_files, model_folder, 3)
    return dataset, block_documents(dataset, model_folder)


def test_records_are_shuffled_across_files_before_packing(seed_3):
    first_blocks = seed_3[1][:4]
    sources = {doc[0] for block in first_blocks for doc in block}
    assert sources == {"A", "B"}, first_blocks


def test_the_shuffle_is_the_same_on_every_execution(seed_3, model_folder):
    dataset, first_execution = seed_3  # one Dataset, executed twice: epochs and resumes do that
    assert block_documents(dataset, model_folder) == first_execution


def test_another_seed_gives_another_order(seed_3, two_files, model_folder):
    assert seed_3[1] != block_documents(packed(two_files, model_folder, 4), model_folder)


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
    assert dataset_pass(shard, micro_batch=1, blocks=1)[0][0]["id"].device.type == "cpu"  # validation's


def test_each_epoch_has_its_own_order_of_every_block(shard):
    ids = row_ids(shard, 2 * ROWS, shuffle_seed=11)
    first, second = ids[:ROWS], ids[ROWS:]
    assert sorted(first) == sorted(second) == list(range(ROWS))
    assert first != list(range(ROWS)) and second != first


def test_a_resumed_position_replays_the_same_order(shard):
    whole = row_ids(shard, 2 * ROWS, shuffle_seed=11)
    assert row_ids(shard, 2 * ROWS - 700, shuffle_seed=11, position=700) == whole[700:]


def test_workers_read_one_shuffled_order_each_its_own_rows(shard):
    """Every worker reads the whole stream in the epoch's one order and keeps its rows of each global
    micro-batch: rank 0 the even positions, rank 1 the odd ones, of the order one worker reads."""
    alone = row_ids(shard, ROWS, shuffle_seed=11)
    ranks = [row_ids(shard, ROWS // 2, shuffle_seed=11, rank=r, world=2) for r in (0, 1)]
    assert ranks == [alone[0::2], alone[1::2]]


def test_without_a_seed_blocks_come_in_order(shard):
    assert row_ids(shard, ROWS + 5) == list(range(ROWS)) + list(range(5))


# ---------------------------------------------------------------- validation reads each block once


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def validation_with(monkeypatch, rows: int, micro_batch: int, eval_batches: int,
                    source: dict | None = None) -> list[dict]:
    """One worker's validation, on the blocks a first attempt of one worker sets (eval_batches x micro_batch), from
    `source` (a held-out fraction of --data by default)."""
    import ray.train  # a submodule: `import ray` alone does not load it

    from training.validation_set import validation_batches

    shard = ray.data.from_items([{"input_ids": np.full(8, i), "labels": np.full(8, i), "position_ids": np.arange(8),
                                  "real_tokens": 8} for i in range(rows)]).iterator()
    monkeypatch.setattr(ray.train, "get_dataset_shard", lambda name: shard, raising=False)
    cfg = TrainConfig(model="folder", data="data.jsonl", micro_batch=micro_batch, eval_batches=eval_batches, seq_len=8,
                      **(source or {"val_fraction": 0.1}))
    return validation_batches(cfg, 512, 0, 1, torch.device("cpu"), eval_batches * micro_batch)[0]


@pytest.mark.parametrize("source", [{"val_fraction": 0.1}, {"val_data": "validation.jsonl"}], ids=["fraction", "file"])
def test_validation_counts_every_block_once(monkeypatch, one_rank_group, source):
    held = validation_with(monkeypatch, rows=5, micro_batch=2, eval_batches=16, source=source)
    seen = [int(row[0]) for batch in held for row in batch["input_ids"]]
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_a_validation_shard_smaller_than_a_micro_batch_is_evaluated(monkeypatch, one_rank_group):
    held = validation_with(monkeypatch, rows=3, micro_batch=4, eval_batches=16)
    assert [batch["input_ids"].shape[0] for batch in held] == [3]


def test_eval_batches_caps_the_pass(monkeypatch, one_rank_group):
    held = validation_with(monkeypatch, rows=50, micro_batch=2, eval_batches=4)
    assert [int(row[0]) for batch in held for row in batch["input_ids"]] == list(range(8))


def test_the_first_attempt_fixes_the_validation_blocks_for_every_later_one(tmp_path):
    """--eval-batches 4 on 2 workers of 4 rows: 32 blocks, stored with the run; a resumed attempt on 1 worker of 2
    rows (which alone would take 8) reads the run's 32."""
    from training.validation_set import VALIDATION_FILE, fixed_blocks

    run = str(tmp_path / "run")
    assert fixed_blocks(run, eval_batches=4, world=2, micro_batch=4) == (
        32, "--eval-batches 4 x 2 workers x --micro-batch 4")
    assert fixed_blocks(run, eval_batches=4, world=1, micro_batch=2) == (
        32, "as the run's first attempt set them (--eval-batches 4 x 2 workers x --micro-batch 4)")
    assert json.loads((tmp_path / "run" / VALIDATION_FILE).read_text())["blocks"] == 32


def test_an_empty_validation_split_is_refused(monkeypatch, one_rank_group):
    with pytest.raises(RuntimeError, match=r"--val-fraction: the validation split holds no block"):
        validation_with(monkeypatch, rows=0, micro_batch=2, eval_batches=4)


def test_synthetic_validation_holds_no_block_the_run_trains_on(one_rank_group):
    """--data random with --val-fraction: val_loss must measure held-out blocks. The 8 validation blocks
    (--eval-batches 4 x --micro-batch 2) are none of the first 256 training blocks of the same seed, the stream
    train_batches feeds from step 1 (a whole run of 128 steps at this batch); uniform ids over 512 tokens, 9 a
    block, never coincide by chance."""
    from training.data import synthetic_batches
    from training.validation_set import validation_batches

    cfg = TrainConfig(data="random", val_fraction=0.1, micro_batch=2, eval_batches=4, seq_len=8, seed=3)
    held = validation_batches(cfg, 512, 0, 1, torch.device("cpu"), 8)[0]
    validation = {tuple(row.tolist()) for batch in held for row in batch["input_ids"]}
    batches = synthetic_batches("random", 3, 512, 8, 2, 0, 1)
    trained = {tuple(row.tolist()) for _ in range(128) for row in next(batches)["input_ids"]}
    assert (len(validation), len(trained)) == (8, 256)
    assert validation.isdisjoint(trained)


# ---------------------------------------------------------------- --shuffle / --no-shuffle as the trainer wires them


@pytest.fixture(scope="module")
def same_length_files(tmp_path_factory, model_folder):
    """Two JSONL files of documents A000..A029, B000..B029, each padded to the same token count and each
    filling one block: packing (longest first, stable) leaves them in the order it reads them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    folder = tmp_path_factory.mktemp("ordered")
    texts = {name: [f"{name}{i:03d}" for i in range(30)] for name in "AB"}
    longest = max(len(tokenizer(t)["input_ids"]) for names in texts.values() for t in names) + 4
    for name, names in texts.items():
        padded = []
        for text in names:
            while len(tokenizer(text)["input_ids"]) < longest:
                text += " x"
            assert len(tokenizer(text)["input_ids"]) == longest, text
            padded.append(text)
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in padded))
    return folder, longest + 1  # each document and its EOS fill a block


FILE_ORDER = [f"{name}{i:03d}" for name in "AB" for i in range(30)]


def trainer_datasets(folder, model_folder, seq_len: int, shuffle: bool) -> dict:
    from training.driver import real_datasets

    cfg = TrainConfig(model=model_folder, data=str(folder), val_data=str(folder), seq_len=seq_len, shuffle=shuffle, seed=3)
    return real_datasets(cfg)


def first_words(dataset, model_folder) -> list[str]:
    return [doc.split(" ")[0] for block in block_documents(dataset, model_folder) for doc in block]


@pytest.mark.parametrize("part", ["train", "validation"])
def test_no_shuffle_reads_every_document_in_file_order(same_length_files, model_folder, part):
    folder, seq_len = same_length_files
    assert first_words(trainer_datasets(folder, model_folder, seq_len, shuffle=False)[part], model_folder) == FILE_ORDER


@pytest.mark.parametrize("part", ["train", "validation"])
def test_shuffle_reads_every_document_out_of_file_order(same_length_files, model_folder, part):
    """Validation too: --eval-batches may evaluate only its head, which must not be a file's head."""
    folder, seq_len = same_length_files
    read = first_words(trainer_datasets(folder, model_folder, seq_len, shuffle=True)[part], model_folder)
    assert sorted(read) == FILE_ORDER and read != FILE_ORDER


@pytest.mark.parametrize("shuffle, in_order", [(False, True), (True, False)])
def test_the_trainers_epochs_follow_the_shuffle_setting(shard, monkeypatch, shuffle, in_order):
    import ray.train

    from training.worker import train_batches

    monkeypatch.setattr(ray.train, "get_dataset_shard", lambda name: shard, raising=False)
    cfg = TrainConfig(model="folder", data="data.jsonl", micro_batch=1, shuffle=shuffle, seed=11)
    stream = train_batches(cfg, 512, rank=0, world=1, rows=0)
    ids = [int(next(stream)["id"][0]) for _ in range(2 * ROWS)]
    assert (ids == list(range(ROWS)) * 2) == in_order
