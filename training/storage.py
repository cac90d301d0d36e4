"""Writing run outputs to a local folder or s3:// through pyarrow's filesystems."""

from __future__ import annotations

from pathlib import Path


def _filesystem(uri: str):
    import pyarrow.fs

    if "://" not in uri:
        return pyarrow.fs.LocalFileSystem(), uri
    return pyarrow.fs.FileSystem.from_uri(uri)


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode())


def write_bytes(uri: str, data: bytes) -> None:
    fs, path = _filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(data)


def read_text(uri: str) -> str:
    fs, path = _filesystem(uri)
    with fs.open_input_stream(path) as stream:
        return stream.read().decode()


def remove(uri: str) -> None:
    fs, path = _filesystem(uri)
    fs.delete_file(path)


def upload_folder(local: str | Path, uri: str) -> None:
    import pyarrow.fs

    fs, path = _filesystem(uri)
    fs.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(str(local), path, destination_filesystem=fs)


def download_folder(uri: str, local: str | Path) -> str:
    """Copy a folder from storage to a local one; returns the local path."""
    import pyarrow.fs

    fs, path = _filesystem(uri)
    Path(local).mkdir(parents=True, exist_ok=True)
    pyarrow.fs.copy_files(path, str(local), source_filesystem=fs)
    return str(local)


def latest_checkpoint(run_uri: str):
    """The newest complete checkpoint of a run (a crashed run leaves no Ray snapshot), or None."""
    from ray.train import Checkpoint

    found = complete_checkpoints(run_uri)
    if not found:
        return None
    fs, path = _filesystem(found[-1][1])
    return Checkpoint(path, filesystem=fs)


def complete_checkpoints(run_uri: str) -> list[tuple[int, str]]:
    """(step, URI) of a run's complete checkpoints (checkpoint_complete), by step, oldest first."""
    import json

    import pyarrow.fs

    fs, path = _filesystem(run_uri)
    try:
        entries = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, OSError):
        return []
    found = []
    for entry in entries:
        if entry.type != pyarrow.fs.FileType.Directory or not entry.base_name.startswith("checkpoint_"):
            continue
        if not checkpoint_complete(fs, entry.path):
            continue
        with fs.open_input_stream(f"{entry.path}/{TRAIN_STATE}") as stream:
            step = json.loads(stream.read())["step"]
        found.append((step, f"{run_uri.rstrip('/')}/{entry.base_name}"))
    return sorted(found)


TRAIN_STATE = "train_state.json"
# The run's settings, beside each checkpoint: what an export from it needs (training.export).
SETTINGS = "settings.json"


def checkpoint_complete(fs, path: str) -> bool:
    """Every rank's shard is there, whole: DCP's .metadata names each shard file and the byte
    range of every item in it (every rank's), so a missing or short file is found; and our
    train_state.json. Each worker uploads its own files, so rank 0's alone prove nothing."""
    import pickle

    import pyarrow.fs

    sizes = {f.base_name: f.size for f in fs.get_file_info(pyarrow.fs.FileSelector(path))
             if f.type == pyarrow.fs.FileType.File}
    if ".metadata" not in sizes or TRAIN_STATE not in sizes:
        return False
    try:
        with fs.open_input_stream(f"{path}/.metadata") as stream:
            metadata = pickle.loads(stream.read())  # DCP's own format: a pickled Metadata object
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return False
    needed: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    return bool(needed) and all(sizes.get(name, -1) >= end for name, end in needed.items())


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

    fs, path = _filesystem(uri)
    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def storage_uri(path: str) -> str:
    """A run's storage path as Ray Train takes it: a URI as given, a local path made absolute."""
    return path.rstrip("/") if "://" in path else str(Path(path).expanduser().resolve())
