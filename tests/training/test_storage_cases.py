"""training.storage, case by case: the run's storage path as given by the user, what exists, and what of a
checkpoint missing_files names (each rank's random state, a .metadata that names no shard)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow.fs
import pytest

from training.storage import exists, missing_files, storage_uri


@pytest.mark.parametrize("given, expected", [
    ("s3://bucket/runs/", "s3://bucket/runs"),  # else every run is under runs//<name>, another S3 key
    ("s3://bucket/runs", "s3://bucket/runs"),
    ("~/runs", str(Path.home() / "runs")),  # the user's home, as a shell would expand it
    ("runs/", "{cwd}/runs"),
])
def test_the_storage_path_is_a_uri_as_given_or_an_absolute_local_path(tmp_path, monkeypatch, given, expected):
    monkeypatch.chdir(tmp_path)
    assert storage_uri(given) == expected.format(cwd=tmp_path.resolve())


def test_a_folder_exists_as_a_file_does(tmp_path):
    """exists() answers for a run folder (training.export's RUN) as for a marker file (a test fault's, a commit)."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "commit.json").write_text("{}")
    assert (exists(str(tmp_path / "run")), exists(str(tmp_path / "run" / "commit.json"))) == (True, True)
    assert not exists(str(tmp_path / "elsewhere"))


def _metadata(storage: dict) -> bytes:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

    return pickle.dumps(Metadata(state_dict_metadata={}, storage_data={
        MetadataIndex(fqn): _StorageInfo(name, 0, 8) for fqn, name in storage.items()}))


def _folder(tmp_path: Path, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return str(tmp_path)


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_every_ranks_random_state_is_needed_rank_0s_and_the_last_ones_included(tmp_path, rank):
    """A 3-worker checkpoint whose shards are whole: any one rank's rng-rank<r>.pt missing is named."""
    shards = {"w0": "__0_0.distcp", "w1": "__1_0.distcp", "w2": "__2_0.distcp"}
    files = {".metadata": _metadata(shards)} | {name: bytes(8) for name in shards.values()}
    files |= {f"rng-rank{r}.pt": b"r" for r in range(3) if r != rank}
    folder = _folder(tmp_path, files)
    assert missing_files(pyarrow.fs.LocalFileSystem(), folder, world=3) == (
        f"rng-rank{rank}.pt missing (rank {rank}'s random state)")


def test_a_metadata_that_names_no_shard_proves_nothing_whole(tmp_path):
    folder = _folder(tmp_path, {".metadata": _metadata({}), "rng-rank0.pt": b"r"})
    assert missing_files(pyarrow.fs.LocalFileSystem(), folder, world=1) == ".metadata names no shard"


@pytest.mark.parametrize("metadata", [b"", b"\x80\x04\x95"], ids=["empty (EOFError)", "cut after the header (UnpicklingError)"])
def test_a_metadata_cut_short_anywhere_is_unreadable_not_a_traceback(tmp_path, metadata):
    """An upload stopped before its first byte leaves an empty .metadata, on which pickle raises EOFError, not
    UnpicklingError: both are a checkpoint that is not complete, passed over by the resume."""
    folder = _folder(tmp_path, {".metadata": metadata, "rng-rank0.pt": b"r"})
    assert missing_files(pyarrow.fs.LocalFileSystem(), folder, world=1) == ".metadata unreadable (cut short)"
