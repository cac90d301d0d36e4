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


def upload_folder(local: str | Path, uri: str) -> None:
    import pyarrow.fs

    fs, path = _filesystem(uri)
    fs.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(str(local), path, destination_filesystem=fs)
