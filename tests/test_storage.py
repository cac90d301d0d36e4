"""Run storage: checkpoint completeness over every rank's shards, --model s3:// to the node cache
once, and the metrics file kept current as the run goes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training.storage import _filesystem, checkpoint_complete, latest_checkpoint, local_model_path


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
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A run with checkpoints at steps 10 and 20, each written by two ranks."""
    run = tmp_path_factory.mktemp("run")
    for step in (10, 20):
        mp.spawn(_save_two_ranks, args=(str(run / f"store-{step}"), str(run / f"checkpoint_{step}"), step), nprocs=2)
    return run


def test_a_checkpoint_with_every_ranks_shards_is_complete(run_folder):
    fs, _ = _filesystem(str(run_folder))
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
    fs, _ = _filesystem(str(run))
    assert not checkpoint_complete(fs, str(newest))
    assert latest_checkpoint(str(run)).path.endswith("checkpoint_10")  # the older, whole one


# ---------------------------------------------------------------- --model s3://


@pytest.fixture
def s3_model(tmp_path, monkeypatch):
    import boto3
    from moto import mock_aws

    from training.tiny_model import save_tiny_model
    from tests.conftest import DATA

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
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
