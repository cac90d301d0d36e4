"""--require-efa on the cluster: NCCL can write its logs on every worker node, not only the driver's.

NCCL falls back to stdout when NCCL_DEBUG_FILE's folder is missing; the driver runs on the head pod,
so a folder it makes is not where the workers run. Each Ray worker process makes it itself, first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from training.config import TrainConfig
from training.driver import prepare_worker_process, runtime_env, worker_env
from training.worker import nccl_log_dir
from tests.conftest import ROOT


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
