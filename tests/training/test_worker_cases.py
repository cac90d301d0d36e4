"""Cases of training/worker.py that the other tests hold on one side only: which NCCL log is this process's, where a
worker's data starts (synthetic and real), the data counts beside a checkpoint, and where an export goes."""

from __future__ import annotations

import json
import os
import sys
import types

import torch

from training import worker
from training.config import TrainConfig
from training.data import synthetic_batches


def test_a_worker_reads_its_own_nccl_log_among_the_nodes_others(tmp_path, monkeypatch):
    """NCCL_DEBUG_FILE is <run>/%h.%p.log: every process on the node writes one; this one's ends in its pid."""
    cfg = TrainConfig(run_name="efa")
    monkeypatch.setattr(worker, "NCCL_LOG_ROOT", str(tmp_path))
    worker.nccl_log_dir(cfg).mkdir()
    for name in ("node-a.1.log", f"node-a.{os.getpid()}.log", "node-a.99999999.log"):
        (worker.nccl_log_dir(cfg) / name).write_text("")
    assert worker.own_nccl_log(cfg).name == f"node-a.{os.getpid()}.log"


def test_a_resumed_synthetic_stream_starts_at_each_workers_next_micro_batch():
    """24 rows consumed by 2 workers x 2 sequences: each worker has taken 6 micro-batches; its next is the 7th."""
    cfg = TrainConfig(data="pattern", workers=2, micro_batch=2, seq_len=16, seed=3)
    first = next(worker.train_batches(cfg, 512, rank=1, world=2, rows=24))
    expected = next(synthetic_batches("pattern", 3, 512, 16, 2, rank=1, world_size=2, position=6))
    assert torch.equal(first["input_ids"], expected["input_ids"])


def real_data_call(monkeypatch, **changes) -> dict:
    """The arguments train_batches hands training.data_plan.dataset_batches for real data."""
    calls = []
    monkeypatch.setattr("training.data_plan.dataset_batches", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setitem(sys.modules, "ray.train", types.SimpleNamespace(get_dataset_shard=lambda name: f"<{name}>"))
    monkeypatch.setattr("ray.train", sys.modules["ray.train"], raising=False)
    cfg = TrainConfig(**({"model": "o/m", "data": "/x/a.jsonl", "workers": 4, "micro_batch": 2, "seed": 7} | changes))
    worker.train_batches(cfg, 512, rank=3, world=4, rows=64)
    [(args, kwargs)] = calls
    return {"dataset": args[0], "micro_batch": args[1], "position": args[2]} | kwargs


def test_real_data_is_shuffled_with_the_runs_seed_from_the_workers_position(monkeypatch):
    """64 rows over 4 workers x 2 sequences: micro-step 8 of the train stream, every worker reading all of it."""
    assert real_data_call(monkeypatch) == {"dataset": "<train>", "micro_batch": 2, "position": 8, "shuffle_seed": 7,
                                           "rank": 3, "world": 4}


def test_no_shuffle_keeps_the_files_order(monkeypatch):
    assert real_data_call(monkeypatch, shuffle=False)["shuffle_seed"] is None


def test_the_data_counts_beside_a_checkpoint_are_read_back(tmp_path):
    assert worker.read_data_counts(tmp_path) == {}  # a checkpoint written before the counts were kept
    (tmp_path / worker.DATA_COUNTS_FILE).write_text(json.dumps({"tokens": 4096, "truncated": 2}))
    assert worker.read_data_counts(tmp_path) == {"tokens": 4096, "truncated": 2}


def test_an_export_is_uploaded_by_rank_0_alone_to_the_runs_hf_export(tmp_path, monkeypatch):
    exported, uploaded = [], []
    monkeypatch.setattr("training.export.export_live", lambda model, cfg, folder, rank: exported.append(rank))
    monkeypatch.setattr("training.storage.upload_folder", lambda folder, uri: uploaded.append(uri))
    cfg = TrainConfig(storage_path="s3://bucket/runs", run_name="r")
    for rank in (0, 1):
        worker.export_model(cfg, None, rank)
    assert exported == [0, 1] and uploaded == ["s3://bucket/runs/r/hf-export"]
    worker.export_model(cfg, None, 0, folder=str(tmp_path))  # a checkpoint's export: written there, not uploaded
    assert exported == [0, 1, 0] and uploaded == ["s3://bucket/runs/r/hf-export"]


def test_only_rank_0_prints(capsys):
    worker.log(1, "from rank 1")
    worker.log(0, "from rank 0")
    assert capsys.readouterr().out == "from rank 0\n"


def test_the_run_folder_is_absolute_and_an_s3_prefix_keeps_one_slash(tmp_path, monkeypatch):
    """Ray Train takes an absolute storage path (RunConfig.storage_path): 'runs' is resolved against the directory
    the run starts in, and s3://bucket/runs/ names s3://bucket/runs/r, not s3://bucket/runs//r."""
    monkeypatch.chdir(tmp_path)
    assert worker.run_uri(TrainConfig(storage_path="runs", run_name="r")) == f"{tmp_path.resolve()}/runs/r"
    assert worker.run_uri(TrainConfig(storage_path="s3://bucket/runs/", run_name="r")) == "s3://bucket/runs/r"


def test_rank_0s_tracker_gets_the_health_gates_line(tmp_path, monkeypatch):
    """The health gate's figures reach the tracker as the run's health tag."""
    from training import tracking

    handed = []
    monkeypatch.setattr(tracking, "start", lambda cfg, run_uri, rank, resumed_from, health, earlier=(): handed.append(
        (rank, resumed_from, health)) or tracking.Tracker())
    metrics_log, _ = worker.run_records(TrainConfig(storage_path=str(tmp_path), run_name="r"), 0, 0, "health gate: passed")
    metrics_log.close()
    assert handed == [(0, 0, "health gate: passed")]
