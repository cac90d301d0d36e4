"""Writing run outputs to a local folder or s3:// through pyarrow's filesystems."""

from __future__ import annotations

from pathlib import Path


def _filesystem(uri: str):
    import pyarrow.fs

    if "://" not in uri:
        return pyarrow.fs.LocalFileSystem(), uri
    return pyarrow.fs.FileSystem.from_uri(uri)


def write_text(uri: str, text: str) -> None:
    fs, path = _filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(text.encode())


def read_text(uri: str) -> str:
    fs, path = _filesystem(uri)
    with fs.open_input_stream(path) as stream:
        return stream.read().decode()


def upload_folder(local: str | Path, uri: str) -> None:
    import pyarrow.fs

    fs, path = _filesystem(uri)
    fs.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(str(local), path, destination_filesystem=fs)


def latest_checkpoint(run_uri: str):
    """The newest complete checkpoint of a run (a crashed run leaves no Ray snapshot), or None.

    Complete means DCP's .metadata and our train_state.json are both there; the newest is the
    one with the highest step.
    """
    import json

    import pyarrow.fs
    from ray.train import Checkpoint

    fs, path = _filesystem(run_uri)
    try:
        entries = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, OSError):
        return None
    best = None
    for entry in entries:
        if entry.type != pyarrow.fs.FileType.Directory or not entry.base_name.startswith("checkpoint_"):
            continue
        files = {f.base_name for f in fs.get_file_info(pyarrow.fs.FileSelector(entry.path))}
        if not {".metadata", "train_state.json"} <= files:
            continue
        with fs.open_input_stream(f"{entry.path}/train_state.json") as stream:
            step = json.loads(stream.read())["step"]
        if best is None or step > best[0]:
            best = (step, entry.path)
    return Checkpoint(best[1], filesystem=fs) if best else None


def exists(uri: str) -> bool:
    import pyarrow.fs

    fs, path = _filesystem(uri)
    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound
