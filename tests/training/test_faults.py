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
