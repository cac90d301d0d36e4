"""training.worker.check_transport's passing branches: without --require-efa nothing is judged (a rank without an
NCCL log does not stop the run), and with it a proven transport is logged once by rank 0 and returned."""

from __future__ import annotations

import os
import shutil
import socket
from types import SimpleNamespace

import pytest

from training import worker
from training.config import TrainConfig
from training.transport import rank_report
from training.worker import check_transport, nccl_log_dir
from tests.training.test_worker_setup import NVLINK, RankZeroOfTwo


@pytest.fixture
def rank_zero(tmp_path, monkeypatch):
    """Rank 0 of two with its own clean one-node NVLink log; the caller says what rank 1 reports."""
    monkeypatch.setattr(worker, "NCCL_LOG_ROOT", str(tmp_path))
    monkeypatch.setattr(worker, "torch", SimpleNamespace(ones=lambda *a, **k: None,
                                                         cuda=SimpleNamespace(synchronize=lambda: None)))

    def place(cfg, rank_1_report):
        nccl_log_dir(cfg).mkdir()
        shutil.copy(NVLINK, nccl_log_dir(cfg) / f"node-a.{os.getpid()}.log")
        monkeypatch.setattr(worker, "dist", RankZeroOfTwo(rank_1_report))
    return place


def test_without_require_efa_a_rank_without_a_log_does_not_stop_the_run(rank_zero, capsys):
    cfg = TrainConfig(run_name="efa", require_efa=False)
    rank_zero(cfg, rank_report(1, "b", None))  # with --require-efa this stops the job (test_worker_setup)
    assert check_transport(cfg, rank=0) == "not checked (NCCL logs are collected with --require-efa)"
    assert capsys.readouterr().out == "NCCL transport: not checked (NCCL logs are collected with --require-efa)\n"


def test_with_require_efa_a_proven_transport_is_returned_and_logged_by_rank_0(rank_zero, capsys):
    cfg = TrainConfig(run_name="efa", require_efa=True)
    rank_zero(cfg, rank_report(1, socket.gethostname(), NVLINK))  # both ranks on this node: a one-node run passes
    line = check_transport(cfg, rank=0)
    assert line == rank_report(0, socket.gethostname(), NVLINK).line and "FAIL" not in line
    assert capsys.readouterr().out == f"NCCL transport: {line}\n"


def test_other_ranks_log_nothing(rank_zero, capsys):
    cfg = TrainConfig(run_name="efa", require_efa=False)
    rank_zero(cfg, rank_report(0, "a", NVLINK))
    check_transport(cfg, rank=1)
    assert capsys.readouterr().out == ""
