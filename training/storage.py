"""Writing run outputs to a local folder or s3:// through pyarrow's filesystems."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def filesystem(uri: str):
    """(pyarrow filesystem, path) of a local path or an s3:// URI."""
    import pyarrow.fs

    if "://" not in uri:
        return pyarrow.fs.LocalFileSystem(), uri
    return pyarrow.fs.FileSystem.from_uri(uri)


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode())


def write_bytes(uri: str, data: bytes) -> None:
    fs, path = filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(data)


def read_text(uri: str) -> str:
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as stream:
        return stream.read().decode()


def remove(uri: str) -> None:
    fs, path = filesystem(uri)
    fs.delete_file(path)


def upload_folder(local: str | Path, uri: str) -> None:
    import pyarrow.fs

    fs, path = filesystem(uri)
    fs.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(str(local), path, destination_filesystem=fs)


def download_folder(uri: str, local: str | Path) -> str:
    """Copy a folder from storage to a local one; returns the local path."""
    import pyarrow.fs

    fs, path = filesystem(uri)
    Path(local).mkdir(parents=True, exist_ok=True)
    pyarrow.fs.copy_files(path, str(local), source_filesystem=fs)
    return str(local)


def latest_checkpoint(run_uri: str):
    """The newest complete checkpoint of a run (scan_checkpoints), as a ray.train.Checkpoint, or None."""
    found = complete_checkpoints(run_uri)
    return ray_checkpoint(found[-1][1]) if found else None


def ray_checkpoint(uri: str):
    """A checkpoint folder as a ray.train.Checkpoint (as_directory() downloads one in S3)."""
    from ray.train import Checkpoint

    fs, path = filesystem(uri)
    return Checkpoint(path, filesystem=fs)


def complete_checkpoints(run_uri: str) -> list[tuple[int, str]]:
    """(step, URI) of a run's complete checkpoints (scan_checkpoints), by step, oldest first."""
    return [(found.step, found.uri) for found in scan_checkpoints(run_uri) if found.complete]


TRAIN_STATE = "train_state.json"
# The run's settings, beside each checkpoint: what an export from it needs (training.export).
SETTINGS = "settings.json"
COMMIT = "commit.json"
"""Written last into a checkpoint folder, by rank 0, once every rank's files are in storage (training.checkpoint)."""
COMMIT_PROTOCOL = "commit marker"
"""train_state.json's "protocol" in checkpoints that count only with their COMMIT marker; older ones have none and
count when every rank's shards are verified (checkpoint_status)."""


def rng_file(rank: int) -> str:
    """A rank's random state in a checkpoint: each worker writes and uploads its own."""
    return f"rng-rank{rank}.pt"


@dataclass(frozen=True)
class FoundCheckpoint:
    step: int | None
    """None when the folder holds no readable train_state.json."""
    uri: str
    complete: bool
    why: str
    """committed; written before commit markers and verified; or what is missing."""


def scan_checkpoints(run_uri: str) -> list[FoundCheckpoint]:
    """Every checkpoint_* folder of a run, complete or not, with why (checkpoint_status), by step (unreadable last)."""
    import pyarrow.fs

    fs, path = filesystem(run_uri)
    try:
        entries = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, OSError):
        return []
    found = []
    for entry in entries:
        if entry.type != pyarrow.fs.FileType.Directory or not entry.base_name.startswith("checkpoint_"):
            continue
        complete, why, step = checkpoint_status(fs, entry.path)
        found.append(FoundCheckpoint(step, f"{run_uri.rstrip('/')}/{entry.base_name}", complete, why))
    return sorted(found, key=lambda f: (f.step is None, f.step or 0, f.uri))


def checkpoint_complete(fs, path: str) -> bool:
    return checkpoint_status(fs, path)[0]


def checkpoint_status(fs, path: str) -> tuple[bool, str, int | None]:
    """(complete, why, step) of one checkpoint folder. One written with the commit protocol counts only with its
    COMMIT marker (and its files still there); one written before it counts when every rank's shard is there,
    whole (missing_files)."""
    import json

    sizes = file_sizes(fs, path)
    if TRAIN_STATE not in sizes:
        return False, f"no {TRAIN_STATE} (rank 0's files did not all arrive)", None
    try:
        with fs.open_input_stream(f"{path}/{TRAIN_STATE}") as stream:
            state = json.loads(stream.read())
        step = int(state["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"{TRAIN_STATE} unreadable (cut short)", None
    missing = missing_files(fs, path, sizes, state.get("world"))
    if state.get("protocol") == COMMIT_PROTOCOL:
        if COMMIT not in sizes:
            return False, "no commit marker: " + (missing or "every file is there, but the save stopped before its commit"), step
        if missing:
            return False, f"committed, but {missing} since", step
        return True, "committed", step
    if missing:
        return False, missing, step
    return True, "written before commit markers; every rank's shards verified", step


def file_sizes(fs, path: str) -> dict[str, int]:
    """Size by name of every file directly in a folder (none where it does not exist)."""
    import pyarrow.fs

    return {f.base_name: f.size for f in fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
            if f.type == pyarrow.fs.FileType.File}


def missing_files(fs, path: str, sizes: dict[str, int] | None = None, world: int | None = None) -> str | None:
    """What of a checkpoint is not in storage, whole; None when nothing. DCP's .metadata names each shard file
    and the byte range of every item in it (every rank's), so a missing or short file is found; each of the
    `world` ranks' random state (rng-rank<r>.pt) where the world is known. Each worker uploads its own files,
    so rank 0's alone prove nothing."""
    import pickle

    sizes = file_sizes(fs, path) if sizes is None else sizes
    if ".metadata" not in sizes:
        return "no .metadata (DCP's index, written by rank 0)"
    try:
        with fs.open_input_stream(f"{path}/.metadata") as stream:
            metadata = pickle.loads(stream.read())  # DCP's own format: a pickled Metadata object
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return ".metadata unreadable (cut short)"
    needed: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    if not needed:
        return ".metadata names no shard"
    for name, end in sorted(needed.items()):
        if name not in sizes:
            return f"{name} missing"
        if sizes[name] < end:
            return f"{name} holds {sizes[name]} of {end} bytes"
    for rank in range(world or 0):
        if rng_file(rank) not in sizes:
            return f"{rng_file(rank)} missing (rank {rank}'s random state)"
    return None


def remove_folder(uri: str) -> None:
    fs, path = filesystem(uri)
    fs.delete_dir(path)


def local_model_path(model: str, cache_dir: str | None) -> str:
    """An s3:// model folder copied to this node's cache once (the first process to get here
    downloads, under a file lock; the others wait and reuse it); anything else unchanged."""
    if not model.startswith("s3://"):
        return model
    import fcntl
    import os

    target = Path(cache_dir or Path.home() / ".cache" / "eks-fsdp-efa") / "s3" / model.removeprefix("s3://").rstrip("/")
    done = target / ".download-complete"
    if done.exists():
        return str(target)
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                download_prefix(model, target)
                done.write_text(str(os.getpid()))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return str(target)


def download_prefix(uri: str, target: Path) -> int:
    """Every object under an s3:// prefix into a local folder (boto3: the pod's or machine's
    credentials); returns the number of files."""
    import boto3

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    s3 = boto3.client("s3")
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix):]
            if not relative or relative.endswith("/"):
                continue
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, item["Key"], str(destination))
            count += 1
    if count == 0:
        raise FileNotFoundError(f"--model: nothing under {uri}")
    return count


def exists(uri: str) -> bool:
    import pyarrow.fs

    fs, path = filesystem(uri)
    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def storage_uri(path: str) -> str:
    """A run's storage path as Ray Train takes it: a URI as given, a local path made absolute."""
    return path.rstrip("/") if "://" in path else str(Path(path).expanduser().resolve())
