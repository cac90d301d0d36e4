"""The fault matrix beyond `make test` (`make fault-matrix`; docs/testing.md, "Fault matrix"): every fault at every
moment, chain by chain (tests/training/fault_chains.py), against one uninterrupted run of the same settings on one
local Ray. `core` runs in test_train_ray and the epoch moment in test_train_ray_sft (make test)."""

from __future__ import annotations

import pytest

from tests.conftest import local_ray
from tests.training import fault_chains
from tests.training.conftest import STEPS, chain_config
from training.train import fit

pytestmark = pytest.mark.fault_matrix
MATRIX = [name for name in fault_chains.CHAINS if name != "core"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    with fault_chains.fault_environment(root):  # before Ray starts: the workers inherit it
        ray = local_ray(3)
        next(ray)
        yield root
        next(ray, None)


@pytest.fixture(scope="module")
def uninterrupted(workspace):
    return fault_chains.outcome(workspace, fit(chain_config(workspace, "uninterrupted")))


_chains: dict[str, dict] = {}


def chain(workspace, name: str) -> dict:
    if name not in _chains:
        resumes = fault_chains.CHAINS[name][1]
        _chains[name] = fault_chains.outcome(workspace, fit(chain_config(workspace, name, max_failures=len(resumes))))
    return _chains[name]


@pytest.mark.parametrize("name", MATRIX)
def test_each_retry_resumes_from_the_step_its_fault_leaves_committed(workspace, name):
    found = chain(workspace, name)
    assert [a["resumed_from"] for a in found["attempts"]] == [0] + fault_chains.CHAINS[name][1]
    assert found["summary"]["final_step"] == STEPS


@pytest.mark.parametrize("name", MATRIX)
def test_every_step_trained_the_uninterrupted_runs_rows_once(workspace, uninterrupted, name):
    assert list(uninterrupted["rows"]) == list(range(1, STEPS + 1))
    assert chain(workspace, name)["rows"] == uninterrupted["rows"]


@pytest.mark.parametrize("name", MATRIX)
def test_every_steps_loss_is_the_uninterrupted_runs(workspace, uninterrupted, name):
    assert chain(workspace, name)["losses"] == pytest.approx(uninterrupted["losses"], rel=1e-6)


def test_a_kill_while_a_save_is_in_flight_loses_that_save_only_and_the_retry_names_it(workspace):
    """pending: rank 1 killed at step 5 while its upload of step 4 is held back: step 4 was never committed."""
    lines = chain(workspace, "pending")["attempts"][1]["lines"]
    assert any(" (step 4): no commit marker: " in line for line in lines), lines
    assert lines[-1] == "resume: no complete checkpoint; training starts from step 0"


def test_a_refused_write_stops_the_attempt_on_the_rank_that_wrote(workspace):
    """first: step 4's upload refused on rank 1 with nothing committed before: the retry starts over, naming it."""
    lines = chain(workspace, "first")["attempts"][5]["lines"]
    assert any(" (step 4): no commit marker: " in line for line in lines), lines
