"""benchmarks/bench.py's wiring without launching anything: the torchrun command, its environment, the group's spec,
the worker's arguments and the GPU count checks."""

from __future__ import annotations

import argparse
import io
import json
import os

import pytest

from benchmarks import bench
from benchmarks.suites import Case, Group


class FakeProc:
    def __init__(self, command, env, **kwargs):
        launched.append((command, env))
        self.stdout = io.StringIO("")

    def wait(self):
        return 7  # a non-zero status must come back as the group's


launched: list = []


@pytest.fixture()
def group_run(monkeypatch, tmp_path):
    launched.clear()
    monkeypatch.setattr(bench.subprocess, "Popen", FakeProc)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("NCCL_NET", "from-the-shell")

    def run(world_size=2, gpus=4, site=None):
        group = Group("g", world_size, [Case("a"), Case("b", levers=("gc",))], env={"NCCL_NET": "Socket"},
                      measure_matmul=False, measure_links=True, gpus_per_node=1)
        args = argparse.Namespace(gpus=gpus, model="tiny", warmup=2, steps=5, site=site)
        status = bench.run_group(group, tmp_path, args)
        [(command, env)] = launched
        return status, command, env, json.loads((tmp_path / "group-g.json").read_text())
    return run


def _option(command, name):
    return command[command.index(name) + 1]


def test_a_group_runs_its_world_size_of_workers_with_the_chosen_warmup_steps_and_model(group_run):
    status, command, _, _ = group_run()
    assert status == 7
    assert "--nproc-per-node=2" in command
    assert (_option(command, "--warmup"), _option(command, "--steps"), _option(command, "--model")) == ("2", "5", "tiny")


def test_a_groups_spec_carries_its_measurements_and_layout(group_run):
    _, _, _, spec = group_run()
    assert (spec["measure_matmul"], spec["measure_links"], spec["gpus_per_node"]) == (False, True, 1)
    assert [c["name"] for c in spec["cases"]] == ["a", "b"] and spec["cases"][1]["levers"] == ["gc"]


def test_a_groups_environment_wins_over_the_shells_and_the_site_goes_first_on_the_path(group_run, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "shell-path")
    _, _, env, _ = group_run(site="the-site")
    assert env["NCCL_NET"] == "Socket"  # the sockets A/B must not run on the shell's transport
    assert env["PYTHONPATH"] == os.pathsep.join(["the-site", "shell-path"])
    assert env["NCCL_DEBUG"] == "INFO"


@pytest.mark.parametrize("world_size, gpus, visible", [(2, 4, "0,1"), (1, 4, "0"), (4, 4, None)])
def test_a_group_smaller_than_the_gpus_is_pinned_to_the_first_ones(group_run, world_size, gpus, visible):
    _, _, env, _ = group_run(world_size=world_size, gpus=gpus)
    assert env.get("CUDA_VISIBLE_DEVICES") == visible


def test_a_worker_gets_warmup_then_steps(monkeypatch, tmp_path):
    given = []
    monkeypatch.setattr(bench, "worker", lambda *a: given.append(a))
    assert bench.main(["--worker", "spec.json", "--out", str(tmp_path), "--model", "tiny", "--warmup", "2", "--steps", "5"]) == 0
    assert given == [("spec.json", str(tmp_path), "tiny", 2, 5)]


@pytest.mark.parametrize("gpus, expected_gpus, error", [
    (None, 4, None),  # default: every visible GPU
    (4, 4, None),
    (1, 1, None),
    (5, 5, "--gpus: 5 must be between 1 and the 4 visible GPU(s)"),
])
def test_gpus_default_to_the_visible_ones_and_no_more_are_accepted(monkeypatch, tmp_path, gpus, expected_gpus, error):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    args = argparse.Namespace(model="tiny", warmup=1, steps=1, rounds=1, gpus=gpus, out=str(tmp_path), cpu=False)
    assert bench.check_args(args) == error
    assert args.gpus == expected_gpus


def test_the_suites_groups_each_run_and_a_failed_one_is_named(monkeypatch, tmp_path, capsys):
    ran = []
    monkeypatch.setattr(bench, "run_group", lambda group, out, args: ran.append(group.name) or (1 if group.name == "main" else 0))
    monkeypatch.setattr(bench, "report", lambda out, groups, gpus: f"report of {len(groups)} groups on {gpus} GPU(s)")
    assert bench.main(["--cpu", "--suite", "smoke", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "report of" in captured.out and "on 1 GPU(s)" in captured.out
    assert "error: group(s) main exited non-zero" in captured.err and ran
