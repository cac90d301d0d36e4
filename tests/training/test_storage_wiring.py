"""training.storage.missing_files at the boundary of a shard's size: a file that holds exactly the bytes .metadata
names is whole; one byte short is not (a commit that took the whole file for short would wait its 30 minutes)."""

from __future__ import annotations

import pickle

import pyarrow.fs
import pytest

from training.storage import missing_files


def _metadata(offset: int, length: int) -> bytes:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

    return pickle.dumps(Metadata(state_dict_metadata={}, storage_data={
        MetadataIndex("w"): _StorageInfo("__0_0.distcp", offset, length)}))


@pytest.mark.parametrize("size, expected", [
    (24, None),  # offset 16 + length 8: the item ends at byte 24, the file holds it all
    (25, None),
    (23, "__0_0.distcp holds 23 of 24 bytes"),
])
def test_a_shard_file_holding_exactly_the_bytes_metadata_names_is_whole(tmp_path, size, expected):
    (tmp_path / ".metadata").write_bytes(_metadata(offset=16, length=8))
    (tmp_path / "__0_0.distcp").write_bytes(bytes(size))
    (tmp_path / "rng-rank0.pt").write_bytes(b"r")
    assert missing_files(pyarrow.fs.LocalFileSystem(), str(tmp_path), world=1) == expected


def test_the_furthest_item_of_a_shard_file_sets_the_size_it_needs(tmp_path):
    """Several items share one shard file: the one that ends last counts, whatever their order in .metadata."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

    (tmp_path / ".metadata").write_bytes(pickle.dumps(Metadata(state_dict_metadata={}, storage_data={
        MetadataIndex("a"): _StorageInfo("__0_0.distcp", 10, 30), MetadataIndex("b"): _StorageInfo("__0_0.distcp", 0, 10)})))
    (tmp_path / "__0_0.distcp").write_bytes(bytes(39))
    assert missing_files(pyarrow.fs.LocalFileSystem(), str(tmp_path)) == "__0_0.distcp holds 39 of 40 bytes"


@pytest.mark.parametrize("train_state", [b'{"step": 7, "wor', b'{"world": 2}', b'[7]', b'{"step": "seven"}'])
def test_a_train_state_cut_short_or_malformed_is_an_unreadable_checkpoint_not_a_traceback(tmp_path, train_state):
    """json.loads raises ValueError (JSONDecodeError) on a file cut short, KeyError without a step, TypeError on a
    list, ValueError on a step that is no number: each is a checkpoint passed over, the resume goes on."""
    from training.storage import TRAIN_STATE, checkpoint_status

    (tmp_path / TRAIN_STATE).write_bytes(train_state)
    assert checkpoint_status(pyarrow.fs.LocalFileSystem(), str(tmp_path)) == (
        False, f"{TRAIN_STATE} unreadable (cut short)", None)
