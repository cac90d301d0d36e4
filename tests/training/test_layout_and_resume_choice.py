"""Which mesh a placement gets, and which checkpoint a restart resumes: decided once for every rank."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from training import worker
from training.config import TrainConfig
from training.layout import LayoutError
from tests.process_group import leave, spawn

# Six workers on two 4-GPU nodes: Ray places four on one node and two on the other.
UNEVEN = ["node-a"] * 4 + ["node-b"] * 2


def mesh_for(monkeypatch, sharding: str, node_of_rank: list[str]):
    """worker.sharding_mesh with Ray's placement and the mesh constructor stood in for."""
    import ray

    import training.model

    monkeypatch.setattr(dist, "all_gather_object", lambda out, obj: out.__setitem__(slice(None), node_of_rank))
    monkeypatch.setattr(ray, "get_runtime_context", lambda: type("C", (), {"get_node_id": lambda self: "x"})())
    monkeypatch.setattr(training.model, "device_mesh", lambda device, sharding, nodes, per_node: (sharding, nodes, per_node))
    cfg = TrainConfig(model="tiny", sharding=sharding)
    return worker.sharding_mesh(cfg, torch.device("cpu"), 0, len(node_of_rank))


def test_full_sharding_takes_an_uneven_placement(monkeypatch):
    mesh, sharding = mesh_for(monkeypatch, "full", UNEVEN)
    assert sharding == "full" and mesh == ("full", 1, 6)


def test_auto_falls_back_to_full_on_an_uneven_placement(monkeypatch):
    mesh, sharding = mesh_for(monkeypatch, "auto", UNEVEN)
    assert sharding == "full" and mesh == ("full", 1, 6)


def test_hybrid_refuses_an_uneven_placement(monkeypatch):
    with pytest.raises(LayoutError, match=r"uneven placement: \{'node-a': 4, 'node-b': 2\}"):
        mesh_for(monkeypatch, "hybrid", UNEVEN)


def test_hybrid_on_an_even_placement_is_two_by_two(monkeypatch):
    mesh, sharding = mesh_for(monkeypatch, "hybrid", ["a", "a", "b", "b"])
    assert mesh == ("hybrid", 2, 2)


def _resume_worker(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    # Each rank's own listing of storage: an upload completed between rank 0's and rank 1's.
    listings = {0: "checkpoint_000008", 1: "checkpoint_000016"}
    calls = []

    def listing():
        calls.append(rank)
        return listings[rank]

    chosen = worker.rank0_choice(listing, rank)
    torch.save({"chosen": chosen, "listed": calls}, f"{out}.{rank}")
    leave()


def test_every_rank_resumes_from_rank_0s_choice(tmp_path):
    out = str(tmp_path / "choice")
    spawn(_resume_worker, args=(str(tmp_path / "store"), out), nprocs=2, join=True)
    results = [torch.load(f"{out}.{rank}") for rank in (0, 1)]
    assert [r["chosen"] for r in results] == ["checkpoint_000008", "checkpoint_000008"]
    assert [r["listed"] for r in results] == [[0], []]  # only rank 0 lists storage
