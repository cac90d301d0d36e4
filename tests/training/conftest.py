"""What the Ray Train modules share (test_train_ray, test_train_ray_sft): each runs on a local Ray of its own, started
with the fault matrix's environment (tests/training/fault_chains.py) and beside a real MLflow server on loopback. The
two modules are groups of their own (tests/conftest.py GROUPS): under `make test` they run at once, one per process."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import local_ray
from tests.training import fault_chains
from tests.training.mlflow_server import Server
from training.config import TrainConfig
from training.config_rules import validate

STEPS, EVERY = 24, 8
# Two micro-batches per step: a resume must skip grad_accum micro-batches per step done, not one per step.
SHAPE = {"micro_batch": 2, "grad_accum": 2}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return tmp_path_factory.mktemp("ray-runs")


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """Started first: it comes up while the module's Ray starts."""
    server = Server(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fewer_shuffle_blocks():
    """A shuffled dataset cut into 8 blocks instead of training.data's 64: each block is three Ray tasks an execution
    (split, shuffle, pack), and 64 made each execution of the test corpus take 10-30 s here. The order's properties
    (seeded, across files, the same on every execution) hold for any fixed count."""
    import training.data

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training.data, "SHUFFLE_INPUT_BLOCKS", 8)
        yield


@pytest.fixture(scope="module")
def ray_with_faults(mlflow_server, workspace):
    with fault_chains.fault_environment(workspace):  # before Ray starts: the workers inherit it
        yield from local_ray(3)


def config(tmp_path, name: str, **overrides) -> TrainConfig:
    base = TrainConfig(model="tiny", steps=STEPS, seq_len=64, micro_batch=4, lr=3e-3, warmup_steps=4, min_lr_ratio=0.2,
                       data="pattern", storage_path=str(tmp_path), run_name=name, checkpoint_every=EVERY,
                       workers=2, local=True, seed=5)
    return validate(dataclasses.replace(base, **overrides))


def chain_config(root, name: str, **overrides) -> TrainConfig:
    """A fault chain's run (fault_chains.CHAINS): the uninterrupted run's settings, a checkpoint every
    fault_chains.EVERY steps and a hang bound of fault_chains.WATCHDOG_S."""
    return config(root, name, **SHAPE, checkpoint_every=fault_chains.EVERY, watchdog_step_seconds=fault_chains.WATCHDOG_S,
                  **overrides)


def losses(summary: dict) -> dict[int, float]:
    return {entry["step"]: entry["loss"] for entry in summary["loss_history"]}


def assert_only_judged_rest_calls(server: Server) -> None:
    """tools/seams grants and judges the pods' calls from tracking.MLFLOW_OPERATIONS: a call the client makes that
    is missing there would be refused on a SageMaker tracking server."""
    from training.tracking import MLFLOW_OPERATIONS

    called = server.paths_called() - {"/api/2.0/mlflow/runs/search"}  # the tests' own search
    assert "/api/2.0/mlflow/runs/log-batch" in called and called <= set(MLFLOW_OPERATIONS)
