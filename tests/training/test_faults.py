"""The test faults' setting (training.faults.FAULTS_ENV): which fault is armed at which step of which run, read as
its docstring states it: "kind@step[,kind@step...]" for every run, "run=kind@step,...;run2=..." for the runs named."""

from __future__ import annotations

import pytest

from training.faults import FAULTS_ENV, armed


@pytest.mark.parametrize("setting, kind, step, run, fires", [
    ("kill@3", "kill", 3, "sft", True),  # no run named: every run
    ("kill@3", "kill", 3, "other", True),
    ("kill@3", "kill", 4, "sft", False),
    ("kill@3", "hang", 3, "sft", False),
    ("nan@2,kill@3", "kill", 3, "sft", True),
    ("sft=kill@3", "kill", 3, "sft", True),
    ("sft=kill@3", "kill", 3, "other", False),
    ("other=hang@5;sft=kill@3,slow@4", "slow", 4, "sft", True),
    ("other=hang@5;sft=kill@3,slow@4", "hang", 5, "sft", False),
    ("other=hang@5;kill@3", "kill", 3, "sft", True),  # an unnamed part beside a named one
])
def test_a_fault_fires_at_its_step_in_the_runs_its_setting_names(monkeypatch, setting, kind, step, run, fires):
    monkeypatch.setenv(FAULTS_ENV, setting)
    assert armed(kind, step, f"/tmp/storage/{run}/") is fires


def test_no_setting_arms_nothing(monkeypatch):
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    assert not armed("kill", 3, "/tmp/storage/sft")


def test_inject_failure_at_step_kills_the_last_ranks_worker_once_per_run_without_the_env(tmp_path, monkeypatch):
    """--inject-failure-at-step 3 (TrainConfig: the last rank's worker is killed, SIGKILL, once at this step) needs no
    TRAINER_TEST_FAULTS: on 2 workers, rank 1 is killed at the start of step 3, not at step 2, not rank 0, and not
    again when the retry trains step 3 a second time (else the recovery it exercises would never finish)."""
    import os
    import signal
    import types

    from training import faults
    from training.command_line import parse_args

    monkeypatch.delenv(FAULTS_ENV, raising=False)
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(faults, "os", types.SimpleNamespace(environ=os.environ, getpid=lambda: 4242,
                                                            kill=lambda pid, sig: killed.append((pid, sig))))
    cfg = parse_args(["--inject-failure-at-step", "3"])
    run = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    for step, rank in [(2, 1), (3, 0), (3, 1), (3, 1)]:  # the last (3, 1): the retry after the kill
        faults.at_step_start(cfg, step, rank, 2, run, model=None)
    assert killed == [(4242, signal.SIGKILL)]


def test_a_slow_upload_outlasts_the_chains_hang_bound_and_the_watchdogs_poll():
    """The core chain's hang at step 13 must find step 12's held upload still pending (test_train_ray checks the
    dump); the watchdog fires up to one poll after the bound."""
    from tests.training import fault_chains
    from training import faults, watchdog

    assert faults.SLOW_UPLOAD_S > fault_chains.WATCHDOG_S + watchdog.POLL_S
