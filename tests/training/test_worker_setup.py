"""--require-efa on the cluster: NCCL can write its logs on every worker node, not only the driver's.

NCCL falls back to stdout when NCCL_DEBUG_FILE's folder is missing; the driver runs on the head pod,
so a folder it makes is not where the workers run. Each Ray worker process makes it itself, first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import shutil
from types import SimpleNamespace

import pytest
import ray

from training import worker
from training.config import TrainConfig
from training.driver import prepare_worker_process, runtime_env, worker_env
from training.transport import rank_report
from training.worker import check_transport, nccl_log_dir
from tests.conftest import DATA, ROOT


def test_require_efa_sends_nccl_logs_to_a_per_run_folder():
    cfg = TrainConfig(run_name="efa-check", require_efa=True)
    env = worker_env(cfg)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_FILE"] == f"{nccl_log_dir(cfg)}/%h.%p.log"
    assert "NCCL_DEBUG_FILE" not in worker_env(TrainConfig(run_name="quiet"))


def test_setup_hook_makes_the_folder_in_a_fresh_process(tmp_path):
    target = tmp_path / "nested" / "nccl"
    code = "from training.driver import prepare_worker_process; prepare_worker_process()"
    env = os.environ | {"NCCL_DEBUG_FILE": f"{target}/%h.%p.log", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert target.is_dir()


def test_setup_hook_does_nothing_without_a_debug_file(tmp_path, monkeypatch):
    monkeypatch.delenv("NCCL_DEBUG_FILE", raising=False)
    prepare_worker_process()  # no folder to make, no error


@pytest.fixture
def ray_with_the_jobs_runtime_env(tmp_path):
    run = f"worker-setup-{os.getpid()}-{tmp_path.name}"
    cfg = TrainConfig(run_name=run, require_efa=True)
    folder = nccl_log_dir(cfg)
    assert not folder.exists()
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", runtime_env=runtime_env(cfg))
    yield folder
    ray.shutdown()
    if folder.exists():
        folder.rmdir()


def test_ray_workers_make_the_folder_before_any_user_code(ray_with_the_jobs_runtime_env):
    folder = ray_with_the_jobs_runtime_env

    @ray.remote
    def folder_exists_when_the_task_starts(path: str) -> bool:
        return Path(path).is_dir()

    # The driver (this process) made nothing: the folder comes from the worker's setup hook.
    assert ray.get(folder_exists_when_the_task_starts.remote(str(folder)))


NVLINK = DATA / "nccl" / "one-node-2gpu-nvlink.rank0.log"
SOCKET = DATA / "nccl" / "one-node-2gpu-socket-forced.rank0.log"


class RankZeroOfTwo:
    """torch.distributed as rank 0 of a two-rank group sees it: the gather brings rank 1's report (from node b)."""

    def __init__(self, other):
        self.other = other

    def all_reduce(self, tensor): pass

    def barrier(self): pass

    def get_world_size(self): return 2

    def all_gather_object(self, gathered, mine): gathered[:] = [mine, self.other]


@pytest.mark.parametrize("rank_1_log, refused", [
    (SOCKET, "rank 1 on b: inter-node traffic NOT on EFA: socket"),
    (None, "no NCCL log from 1 of 2 ranks (ranks 1 on b)"),
    (NVLINK, "workers run on 2 nodes, but no NCCL communicator in the logs spans nodes"),
])
def test_require_efa_judges_every_ranks_nccl_log_not_only_its_own(tmp_path, monkeypatch, rank_1_log, refused):
    """Rank 0's own log is a clean one-node NVLink log (alone it passes: 'single node'); the other node's rank
    on sockets, without a log, or two nodes no communicator spans, stop the job."""
    cfg = TrainConfig(run_name="efa", require_efa=True)
    monkeypatch.setattr(worker, "NCCL_LOG_ROOT", str(tmp_path))
    nccl_log_dir(cfg).mkdir()
    shutil.copy(NVLINK, nccl_log_dir(cfg) / f"node-a.{os.getpid()}.log")  # NCCL_DEBUG_FILE's %h.%p
    monkeypatch.setattr(worker, "dist", RankZeroOfTwo(rank_report(1, "b", rank_1_log)))
    # No GPU here: the probe collective (a CUDA tensor) does nothing.
    monkeypatch.setattr(worker, "torch", SimpleNamespace(ones=lambda *a, **k: None,
                                                         cuda=SimpleNamespace(synchronize=lambda: None)))
    with pytest.raises(RuntimeError, match=f"^--require-efa: {re.escape(refused)}"):
        check_transport(cfg, rank=0)


@pytest.mark.parametrize("local", [True, False])
def test_the_driver_starts_or_joins_ray_with_the_jobs_runtime_env(monkeypatch, local):
    """On one machine and on the cluster (address auto) alike: a worker started without the job's runtime_env has
    no NCCL_DEBUG_FILE and no setup hook making its folder, and --require-efa then finds no rank's NCCL log."""
    from training.driver import start_ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    cfg = TrainConfig(model="tiny", workers=2, local=local, require_efa=True, run_name="r")
    start_ray(cfg)
    [kwargs] = calls
    assert kwargs["runtime_env"] == runtime_env(cfg) and "NCCL_DEBUG_FILE" in kwargs["runtime_env"]["env_vars"]
    assert kwargs.get("address") == (None if local else "auto")
