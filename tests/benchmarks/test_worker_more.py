"""benchmarks/worker.py on the CPU: the layout a trainer case builds and what its levers are in force for."""

from __future__ import annotations

import contextlib

import pytest
import torch

from benchmarks import levers, worker
from benchmarks.suites import Case


class Built(Exception):
    """Raised by the stand-ins once they have recorded what they were given: nothing is built."""


@pytest.mark.parametrize("world, gpus_per_node, sharding, mesh", [
    (2, 1, "hybrid", (2, 1)),  # two emulated one-GPU nodes: replicate across both, no sharding within one
    (8, 4, "hybrid", (2, 4)),  # two emulated nodes of 4 (the users' 2 x g6.12xlarge)
    (4, None, "hybrid", (1, 4)),  # no emulated nodes: the group's GPUs are one node
    (8, 4, "auto", (2, 4)),  # auto is full sharding, over the same ranks
])
def test_a_trainer_case_builds_its_mesh_as_nodes_by_gpus_per_node(monkeypatch, world, gpus_per_node, sharding, mesh):
    """training.model.device_mesh(device, sharding, nodes, gpus_per_node): row i of a hybrid mesh is node i's GPUs
    (replicate across nodes, shard within one). Swapped, a hybrid case would shard across the nodes instead."""
    import training.model

    given = []

    def device_mesh(device, kind, nodes, per_node):
        given.append((kind, (nodes, per_node)))
        raise Built

    monkeypatch.setattr(training.model, "device_mesh", device_mesh)
    cfg = Case("c", overrides={"sharding": sharding}).train_config("tiny")
    with pytest.raises(Built):
        worker._trainer_step(cfg, torch.device("cpu"), 0, world, None, gpus_per_node)
    assert given == [("full" if sharding == "auto" else "hybrid", mesh)]


@contextlib.contextmanager
def _probe(events):
    events.append("enter")
    try:
        yield
    finally:
        events.append("exit")


def test_a_cases_levers_are_in_force_while_its_model_is_built_and_left_after(monkeypatch):
    """Levers such as fp8-rowwise (the float8 config), fp8-kv (the converted layers) and max-autotune (the compile)
    act when the model is built: entered only around the steps, they would time the default."""
    events = []
    monkeypatch.setitem(levers.LEVERS, "probe", lambda: _probe(events))

    def build(*args, **kwargs):
        events.append("build")
        raise Built("stop here")

    monkeypatch.setattr(worker, "_trainer_step", build)
    case = Case("c", levers=("probe",))
    result = worker.run_case(case, case.train_config("tiny"), torch.device("cpu"), 0, 1, None, 1, 1)
    assert events == ["enter", "build", "exit"]
    assert result["error"] == "Built" and result["levers"] == ["probe"]


@pytest.mark.parametrize("recipe, error", [("example", "FSDP1 needs a GPU"), ("liger", "Liger's kernels need a GPU"),
                                           ("fp8-peer", "Liger's kernels need a GPU")])
def test_a_gpu_only_recipe_on_the_cpu_is_reported_by_what_needs_the_gpu_without_building(monkeypatch, recipe, error):
    events = []
    monkeypatch.setitem(levers.LEVERS, "probe", lambda: _probe(events))
    case = Case("c", recipe=recipe, levers=("probe",))
    assert worker.run_case(case, case.train_config("tiny"), torch.device("cpu"), 0, 1, None, 1, 1)["error"] == error
    assert events == []
