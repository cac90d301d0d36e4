"""Run storage: checkpoint completeness over every rank's shards, run folders on a local disk or in
S3, --model s3:// to the node cache once, and the metrics file kept current as the run goes."""

from __future__ import annotations

import itertools
import json
import pickle
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training.storage import (checkpoint_complete, complete_checkpoints, download_prefix, filesystem, latest_checkpoint,
                              local_model_path, write_text)
from tests.process_group import leave
from tests.conftest import fake_aws_credentials


def _save_two_ranks(rank: int, store: str, folder: str, step: int) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    weight = distribute_tensor(torch.arange(64, dtype=torch.float32).reshape(8, 8) * step, mesh, [Shard(0)])
    dcp.save({"weight": weight}, checkpoint_id=folder)
    if rank == 0:
        from training.checkpoint import write_train_state

        write_train_state(folder, step, step)
    leave()


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A run with checkpoints at steps 10 and 20, each written by two ranks."""
    run = tmp_path_factory.mktemp("run")
    for step in (10, 20):
        mp.spawn(_save_two_ranks, args=(str(run / f"store-{step}"), str(run / f"checkpoint_{step}"), step), nprocs=2)
    return run


def test_a_checkpoint_with_every_ranks_shards_is_complete(run_folder):
    fs, _ = filesystem(str(run_folder))
    assert sorted(p.name for p in (run_folder / "checkpoint_20").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert checkpoint_complete(fs, str(run_folder / "checkpoint_20"))
    assert latest_checkpoint(str(run_folder)).path.endswith("checkpoint_20")


@pytest.mark.parametrize("damage", ["missing rank 1", "short rank 1", "no metadata", "no train state"])
def test_a_checkpoint_missing_any_ranks_bytes_is_not_resumed_from(run_folder, tmp_path, damage):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_folder, run)
    newest = run / "checkpoint_20"
    if damage == "missing rank 1":
        (newest / "__1_0.distcp").unlink()
    elif damage == "short rank 1":
        shard = newest / "__1_0.distcp"
        shard.write_bytes(shard.read_bytes()[:-1])
    elif damage == "no metadata":
        (newest / ".metadata").unlink()
    else:
        (newest / "train_state.json").unlink()
    fs, _ = filesystem(str(run))
    assert not checkpoint_complete(fs, str(newest))
    assert latest_checkpoint(str(run)).path.endswith("checkpoint_10")  # the older, whole one


# ---------------------------------------------------------------- run folders, hand-built checkpoints
#
# A DCP checkpoint as checkpoint_complete reads it: .metadata is the pickled Metadata whose storage_data maps
# each saved item to (shard file, byte offset, length) (torch.distributed.checkpoint.filesystem), beside the
# shard files and our train_state.json. Built by hand, so the byte ranges are known and no save is run.


def _dcp_metadata(items: list[tuple[str, int, int]]) -> bytes:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

    return pickle.dumps(Metadata(state_dict_metadata={}, storage_data={
        MetadataIndex(f"item{i}"): _StorageInfo(name, offset, length) for i, (name, offset, length) in enumerate(items)}))


def _checkpoint(step: int, complete: bool = True) -> dict[str, bytes]:
    """Two ranks' 64-byte shards; incomplete: rank 1's shard never arrived."""
    files = {".metadata": _dcp_metadata([("__0_0.distcp", 0, 64), ("__1_0.distcp", 0, 64)]),
             "__0_0.distcp": bytes(64), "__1_0.distcp": bytes(64),
             "train_state.json": json.dumps({"step": step, "data_position": step}).encode()}
    if not complete:
        del files["__1_0.distcp"]
    return files


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


# Ray Train names a checkpoint folder checkpoint_<local date and time> (StorageContext.make_default_checkpoint_dir_name).
NAME_10, NAME_20, NAME_30 = (f"checkpoint_2026-12-01_10-{m}-00.000000" for m in ("00", "05", "10"))


def test_files_and_folders_beside_the_checkpoints_are_passed_over(tmp_path):
    """A run folder holds Ray's own files (.validate_storage_marker, checkpoint_manager_snapshot.json: a file
    whose name starts like a checkpoint's) and ours (metrics.jsonl, run_summary.json, tensorboard/, hf-export/).
    A local folder lists in the filesystem's order, not sorted: here some of these come before the checkpoint."""
    run = tmp_path / "run"
    _write_files(run, {".validate_storage_marker": b"", "checkpoint_manager_snapshot.json": b"{}", "metrics.jsonl": b"",
                       "run_summary.json": b"{}", "tensorboard/events.out.tfevents.1": b"", "hf-export/config.json": b"{}"})
    _write_files(run / NAME_10, _checkpoint(10))
    assert complete_checkpoints(str(run)) == [(10, f"{run}/{NAME_10}")]


def test_a_run_uri_ending_in_a_slash_names_each_checkpoint_with_one_slash(tmp_path):
    """"/tmp/.../run/" lists as "/tmp/.../run"; its checkpoint is "/tmp/.../run/checkpoint_...", not "run//checkpoint_..."."""
    _write_files(tmp_path / "run" / NAME_10, _checkpoint(10))
    assert complete_checkpoints(f"{tmp_path}/run/") == [(10, f"{tmp_path}/run/{NAME_10}")]


def test_the_latest_of_three_checkpoints_is_the_highest_step(tmp_path):
    """Steps 10, 20 and 30: the newest is 30 (not the middle one, 20)."""
    for step, name in ((10, NAME_10), (20, NAME_20), (30, NAME_30)):
        _write_files(tmp_path / "run" / name, _checkpoint(step))
    assert latest_checkpoint(str(tmp_path / "run")).path == f"{tmp_path}/run/{NAME_30}"


def test_a_checkpoint_whose_metadata_was_cut_short_is_not_complete(tmp_path):
    """An upload cut short leaves half a .metadata: it does not unpickle, so nothing proves the shards whole."""
    import pyarrow.fs

    files = _checkpoint(10)
    files[".metadata"] = files[".metadata"][:len(files[".metadata"]) // 2]
    _write_files(tmp_path / NAME_10, files)
    assert not checkpoint_complete(pyarrow.fs.LocalFileSystem(), str(tmp_path / NAME_10))


@pytest.mark.parametrize("size, complete", [(159, False), (160, True)])
def test_every_item_stored_in_one_shard_file_must_fit_in_it(tmp_path, size, complete):
    """Two items in __0_0.distcp, listed second-first: bytes 100-159 (offset 100, length 60) and 0-99
    (offset 0, length 100). The file must hold 100 + 60 = 160 bytes: 159 is one short."""
    import pyarrow.fs

    _write_files(tmp_path / NAME_10, {".metadata": _dcp_metadata([("__0_0.distcp", 100, 60), ("__0_0.distcp", 0, 100)]),
                                      "__0_0.distcp": bytes(size), "train_state.json": b'{"step": 10}'})
    assert checkpoint_complete(pyarrow.fs.LocalFileSystem(), str(tmp_path / NAME_10)) is complete


# ---------------------------------------------------------------- run folders in S3
#
# pyarrow's S3 client is C++: moto's in-process mock cannot intercept it, so these run moto as a local S3
# server. Both pyarrow (S3FileSystem.from_uri) and boto3 take its address from AWS_ENDPOINT_URL_S3, the
# AWS SDKs' service-specific endpoint variable; storage.py is used as it is.


@pytest.fixture(scope="module")
def s3_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    yield "http://{}:{}".format(*server.get_host_and_port())
    server.stop()


_buckets = itertools.count()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A boto3 client and a new, empty bucket on the local S3 server."""
    import boto3

    fake_aws_credentials(monkeypatch, AWS_ENDPOINT_URL_S3=s3_server)
    client, bucket = boto3.client("s3"), f"runs-{next(_buckets)}"
    client.create_bucket(Bucket=bucket)
    return client, bucket


def _put_files(s3, prefix: str, files: dict[str, bytes]) -> None:
    client, bucket = s3
    for name, data in files.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=data)


def test_a_run_output_under_s3_is_written_to_that_bucket_and_key(s3):
    """s3://BUCKET/job-1/run_summary.json is the object job-1/run_summary.json of bucket BUCKET."""
    client, bucket = s3
    write_text(f"s3://{bucket}/job-1/run_summary.json", '{"steps": 3}')
    assert client.get_object(Bucket=bucket, Key="job-1/run_summary.json")["Body"].read() == b'{"steps": 3}'


def test_the_latest_checkpoint_of_an_s3_run_is_read_from_the_bucket(s3):
    """The trainer resumes through the checkpoint's as_directory(): its files must come from the bucket."""
    _put_files(s3, f"job-1/{NAME_10}", _checkpoint(10))
    with latest_checkpoint(f"s3://{s3[1]}/job-1").as_directory() as folder:
        assert json.loads((Path(folder) / "train_state.json").read_text())["step"] == 10


def test_s3_checkpoints_are_listed_by_step_not_by_folder_name(s3):
    """Ray names checkpoint folders by local wall-clock time, which repeats an hour when daylight saving ends
    (US, 2026-11-01: 01:59 EDT is followed by 01:00 EST). Step 10 at 01:20 EDT, step 20 at 01:50 EDT, step 30
    at 01:10 EST: S3 lists keys in byte order (01-10, 01-20, 01-50), the steps are 10, 20, 30."""
    names = {10: "checkpoint_2026-11-01_01-20-00.000000", 20: "checkpoint_2026-11-01_01-50-00.000000",
             30: "checkpoint_2026-11-01_01-10-00.000000"}
    for step, name in names.items():
        _put_files(s3, f"job-1/{name}", _checkpoint(step))
    run = f"s3://{s3[1]}/job-1"
    assert complete_checkpoints(run) == [(10, f"{run}/{names[10]}"), (20, f"{run}/{names[20]}"), (30, f"{run}/{names[30]}")]


def test_an_incomplete_checkpoint_between_complete_ones_is_skipped(s3):
    """The crashed attempt's step 20 lacks rank 1's shard; the resumed attempt then saved step 30. S3 lists the
    folders in byte order, so step 20 comes between 10 and 30; the listing goes on past it."""
    _put_files(s3, f"job-1/{NAME_10}", _checkpoint(10))
    _put_files(s3, f"job-1/{NAME_20}", _checkpoint(20, complete=False))
    _put_files(s3, f"job-1/{NAME_30}", _checkpoint(30))
    run = f"s3://{s3[1]}/job-1"
    assert complete_checkpoints(run) == [(10, f"{run}/{NAME_10}"), (30, f"{run}/{NAME_30}")]


# ---------------------------------------------------------------- local paths


def test_text_is_written_into_folders_that_do_not_exist_yet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a wrongly split path would make its folder here
    write_text(f"{tmp_path}/run/tensorboard/notes.txt", "written")
    assert (tmp_path / "run" / "tensorboard" / "notes.txt").read_text() == "written"


def test_a_relative_local_path_is_under_the_working_folder(tmp_path, monkeypatch):
    """A relative path is relative to the working folder, as open()'s: runs/job-1/metrics.jsonl from /tmp/X is
    /tmp/X/runs/job-1/metrics.jsonl (pyarrow's from_uri refuses a path without a scheme unless it is absolute)."""
    monkeypatch.chdir(tmp_path)
    write_text("runs/job-1/metrics.jsonl", "{}\n")
    assert (tmp_path / "runs" / "job-1" / "metrics.jsonl").read_text() == "{}\n"


# ---------------------------------------------------------------- --model s3://


@pytest.fixture
def s3_model(tmp_path, monkeypatch):
    import boto3
    from moto import mock_aws

    from benchmarks.tiny_model import save_tiny_model
    from tests.conftest import DATA

    fake_aws_credentials(monkeypatch)
    folder = save_tiny_model(tmp_path / "saved", DATA / "chat.jsonl")
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="models")
        for path in (tmp_path / "saved").iterdir():
            s3.upload_file(str(path), "models", f"qwen-tiny/{path.name}")
        yield "s3://models/qwen-tiny", folder


def test_an_s3_model_is_downloaded_once_per_node_and_loads_by_path(s3_model, tmp_path, monkeypatch):
    import training.storage as storage

    uri, original = s3_model
    downloads = []
    real = storage.download_prefix
    monkeypatch.setattr(storage, "download_prefix", lambda u, t: downloads.append(u) or real(u, t))
    cache = str(tmp_path / "cache")
    paths: list[str] = []
    workers = [threading.Thread(target=lambda: paths.append(local_model_path(uri, cache))) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert downloads == [uri] and len(set(paths)) == 1
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.config import TrainConfig
    from training.model import full_state_dict_on_rank0, model_config

    cfg = TrainConfig(model=uri, cache_dir=cache)
    config = model_config(cfg)
    weights = full_state_dict_on_rank0(cfg, config)
    expected = AutoModelForCausalLM.from_pretrained(original).state_dict()
    assert torch.equal(weights["lm.model.embed_tokens.weight"], expected["model.embed_tokens.weight"])
    assert AutoTokenizer.from_pretrained(paths[0]).decode([40, 41]) == AutoTokenizer.from_pretrained(original).decode([40, 41])


def test_an_empty_s3_prefix_is_named(s3_model, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--model: nothing under s3://models/other"):
        local_model_path("s3://models/other", str(tmp_path / "cache"))


def test_other_models_are_left_alone():
    assert local_model_path("Qwen/Qwen2.5-1.5B", None) == "Qwen/Qwen2.5-1.5B"


def _record_downloads(monkeypatch) -> list[tuple[str, Path]]:
    import training.storage as storage

    calls: list[tuple[str, Path]] = []
    monkeypatch.setattr(storage, "download_prefix", lambda uri, target: calls.append((uri, target)) or 1)
    return calls


def test_an_s3_model_is_cached_under_its_bucket_and_key(tmp_path, monkeypatch):
    """s3://models/team/qwen-tiny/ with --cache-dir CACHE (not made yet) is CACHE/s3/models/team/qwen-tiny."""
    calls = _record_downloads(monkeypatch)
    expected = tmp_path / "cache" / "s3" / "models" / "team" / "qwen-tiny"
    assert local_model_path("s3://models/team/qwen-tiny/", str(tmp_path / "cache")) == str(expected)
    assert calls == [("s3://models/team/qwen-tiny/", expected)]


def test_the_model_cache_defaults_to_the_home_cache_folder(tmp_path, monkeypatch):
    """No --cache-dir: ~/.cache/eks-fsdp-efa (Path.home() is $HOME), so s3://models/qwen-tiny with HOME=/tmp/X/home
    is /tmp/X/home/.cache/eks-fsdp-efa/s3/models/qwen-tiny."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    calls = _record_downloads(monkeypatch)
    expected = tmp_path / "home" / ".cache" / "eks-fsdp-efa" / "s3" / "models" / "qwen-tiny"
    assert local_model_path("s3://models/qwen-tiny", None) == str(expected)
    assert calls == [("s3://models/qwen-tiny", expected)]


# S3 keys as a model folder uploaded with the console's "Create folder" (zero-byte keys ending in "/"): the
# prefix's own marker first, a nested tokenizer folder, and a sibling whose name starts with the same text.
MODEL_KEYS = {"team/qwen-tiny/": b"", "team/qwen-tiny/config.json": b'{"layers": 2}', "team/qwen-tiny/model.safetensors":
              b"weights", "team/qwen-tiny/tokenizer/": b"", "team/qwen-tiny/tokenizer/vocab.json": b'{"a": 0}',
              "team/qwen-tiny-v2/config.json": b'{"layers": 4}', "other/config.json": b"{}"}


@pytest.fixture
def model_bucket(monkeypatch):
    """Bucket "models" holding MODEL_KEYS, and a bucket "qwen-tiny" holding one model at its root."""
    import boto3
    from moto import mock_aws

    fake_aws_credentials(monkeypatch)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="models")
        for key, body in MODEL_KEYS.items():
            s3.put_object(Bucket="models", Key=key, Body=body)
        s3.create_bucket(Bucket="qwen-tiny")
        s3.put_object(Bucket="qwen-tiny", Key="logs/", Body=b"")
        s3.put_object(Bucket="qwen-tiny", Key="config.json", Body=b'{"layers": 2}')
        yield


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_only_the_objects_under_the_model_prefix_are_downloaded(model_bucket, tmp_path):
    """s3://models/team/qwen-tiny/ is bucket "models", prefix "team/qwen-tiny/": not team/qwen-tiny-v2 (an S3
    prefix is matched as text) nor other/."""
    download_prefix("s3://models/team/qwen-tiny/", tmp_path / "model")
    assert sorted(_files(tmp_path / "model")) == ["config.json", "model.safetensors", "tokenizer/vocab.json"]


def test_folder_markers_are_not_downloaded_as_files(model_bucket, tmp_path):
    """The keys "team/qwen-tiny/" and "team/qwen-tiny/tokenizer/" are folders, not files; the first is listed first."""
    download_prefix("s3://models/team/qwen-tiny", tmp_path / "model")
    assert sorted(p.relative_to(tmp_path / "model").as_posix() for p in (tmp_path / "model").rglob("*")) == [
        "config.json", "model.safetensors", "tokenizer", "tokenizer/vocab.json"]
    assert (tmp_path / "model" / "tokenizer").is_dir()


def test_nested_keys_keep_their_folders(model_bucket, tmp_path):
    """team/qwen-tiny/tokenizer/vocab.json lands in TARGET/tokenizer/vocab.json, TARGET two folders not made yet."""
    download_prefix("s3://models/team/qwen-tiny", tmp_path / "cache" / "model")
    assert _files(tmp_path / "cache" / "model") == {"config.json": b'{"layers": 2}', "model.safetensors": b"weights",
                                                    "tokenizer/vocab.json": b'{"a": 0}'}


def test_the_number_of_files_downloaded_is_returned(model_bucket, tmp_path):
    """5 keys under the prefix, 2 of them folder markers: 3 files."""
    assert download_prefix("s3://models/team/qwen-tiny", tmp_path / "model") == 3


def test_a_model_at_a_bucket_root_is_every_key_of_the_bucket(model_bucket, tmp_path):
    """s3://qwen-tiny has no prefix: its one file config.json (logs/ is a folder marker); 1 file."""
    assert download_prefix("s3://qwen-tiny", tmp_path / "model") == 1
    assert _files(tmp_path / "model") == {"config.json": b'{"layers": 2}'}


# ---------------------------------------------------------------- metrics as the run goes


def test_metrics_file_is_current_before_the_run_ends(tmp_path):
    from training.records import RecordWriter

    writer = RecordWriter(str(tmp_path), [{"step": 1, "loss": 3.0}], interval_s=0.01)
    writer.add({"step": 2, "loss": 2.5})
    for _ in range(200):  # the background thread writes it, the step does not wait
        if (tmp_path / "metrics.jsonl").exists() and len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2:
            break
        threading.Event().wait(0.01)
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    writer.add({"step": 3, "loss": 2.0, "val_loss": 2.2})
    writer.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1]) == {"step": 3, "loss": 2.0, "val_loss": 2.2}


def test_a_download_cut_short_is_done_again_not_reused(tmp_path, monkeypatch):
    """A pod killed (or a network error) mid-download leaves the cache folder without its completion marker:
    the next process must fetch the model again, not load half a model."""
    import training.storage as storage

    calls = []

    def download(uri, target):
        calls.append(uri)
        (target / "config.json").write_text("{}")
        if len(calls) == 1:
            raise ConnectionError("connection reset while fetching model.safetensors")
        (target / "model.safetensors").write_text("weights")
        return 2

    monkeypatch.setattr(storage, "download_prefix", download)
    cache = str(tmp_path / "cache")
    with pytest.raises(ConnectionError):
        local_model_path("s3://models/qwen", cache)
    path = local_model_path("s3://models/qwen", cache)
    assert calls == ["s3://models/qwen"] * 2
    assert sorted(p.name for p in Path(path).iterdir()) == [".download-complete", "config.json", "model.safetensors"]
    assert local_model_path("s3://models/qwen", cache) == path and len(calls) == 2  # complete now: reused


def test_a_resumed_run_keeps_the_records_up_to_its_checkpoint_step():
    """A checkpoint at step 2 holds steps 1 and 2; the run resumes at step 3, so the metrics it inherits are
    steps 1 and 2, and the step-3 record of the attempt that died is dropped (it will be written again)."""
    from training.records import read_metrics

    text = "".join(json.dumps({"step": s, "loss": 4.0 - s}) + "\n" for s in (1, 2, 3))
    assert [r["step"] for r in read_metrics(text, up_to_step=2)] == [1, 2]
    assert [r["step"] for r in read_metrics(text)] == [1, 2, 3]


def test_a_log_line_is_a_record_only_if_it_is_an_object_with_a_step():
    from training.records import RECORD_PREFIX, parse_record

    assert parse_record('12:00:01 worker 0: ' + RECORD_PREFIX + '{"step":7,"loss":2.5}') == {"step": 7, "loss": 2.5}
    assert parse_record(RECORD_PREFIX + '[7, 2.5]') is None
    assert parse_record(RECORD_PREFIX + '{"loss":2.5}') is None
    assert parse_record(RECORD_PREFIX + '{"step":7,"lo') is None  # cut short
    assert parse_record('step 7 loss 2.5') is None


def test_the_metrics_file_is_compact_json_lines(tmp_path):
    from training.records import RecordWriter

    writer = RecordWriter(str(tmp_path), [{"step": 1, "loss": 3.0}], interval_s=60)
    writer.close()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step":1,"loss":3.0}\n'
