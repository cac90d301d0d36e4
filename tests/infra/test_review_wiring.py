"""tools/review.py's wiring: each planner call gets the RayJob's own options, in the planner's argument order."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import planning.fp8
from tools import review


@pytest.mark.parametrize("reshard_after_forward, gathered", [(True, False), (False, True)])
def test_the_fp8_line_is_priced_with_the_weights_gathered_only_where_the_job_keeps_them(monkeypatch,
                                                                                         reshard_after_forward,
                                                                                         gathered):
    """FSDP2's reshard_after_forward=False keeps the gathered weights between forward and backward: fp8's weight
    casts are then paid once a step (planning.fp8's `gathered`), so the flag reaches the planner negated."""
    cluster = SimpleNamespace(gpu="L4", world=8, gpus_per_node=4)
    cfg = SimpleNamespace(precision="bf16", reshard_after_forward=reshard_after_forward, lora_rank=16,
                          sharding="full")
    monkeypatch.setattr(review, "_job_plan", lambda template: ("model", "work", cluster, None, None, cfg))
    calls = []
    monkeypatch.setattr(planning.fp8, "fp8_line", lambda *args: calls.append(args) or "fp8: stub")
    assert review.training_fp8_line({}) == "training precision bf16; fp8: stub"
    # full sharding: each weight over all 8 GPUs; the job's LoRA rank, not the default 0
    assert calls == [("L4", "work", "model", 8, gathered, 16)]


def test_the_fp8_line_shards_the_weights_over_a_nodes_gpus_under_hybrid_sharding(monkeypatch):
    cluster = SimpleNamespace(gpu="L4", world=8, gpus_per_node=4)
    cfg = SimpleNamespace(precision="fp8", reshard_after_forward=True, lora_rank=0, sharding="hybrid")
    monkeypatch.setattr(review, "_job_plan", lambda template: ("model", "work", cluster, None, None, cfg))
    calls = []
    monkeypatch.setattr(planning.fp8, "fp8_line", lambda *args: calls.append(args) or "fp8: stub")
    assert review.training_fp8_line({}) == "training precision fp8; fp8: stub"
    assert calls == [("L4", "work", "model", 4, False, 0)]


def test_no_rayjob_plan_gives_no_fp8_line(monkeypatch):
    monkeypatch.setattr(review, "_job_plan", lambda template: None)
    assert review.training_fp8_line({}) is None


def rayjob_template(entrypoint: str) -> dict:
    job = {"kind": "RayJob", "metadata": {"name": "job"}, "spec": {"entrypoint": entrypoint}}
    return {"Resources": {"Job": {"Type": "Custom::AWSCDK-EKS-KubernetesResource",
                                  "Properties": {"Manifest": json.dumps([job])}}}}


@pytest.mark.parametrize("flag, gathered", [([], False), (["--no-reshard-after-forward"], True)])
def test_the_plan_is_estimated_on_the_jobs_nodes_and_layout(monkeypatch, flag, gathered):
    """8 workers on g6.12xlarge (4 GPUs each) are 2 nodes; the layout keeps the weights gathered only where the job
    does not reshard after forward."""
    import planning.auto
    import planning.timing

    monkeypatch.setattr(planning.auto, "model_of", lambda cfg, context, needed: "model")
    seen = []
    monkeypatch.setattr(planning.timing, "estimate", lambda *args: seen.append(args) or "estimate")
    found = review._job_plan(rayjob_template(
        "python -m training.train --instance-type g6.12xlarge --workers 8 --sharding hybrid " + " ".join(flag)))
    assert found is not None
    [(model, work, cluster, layout)] = seen
    assert (cluster.nodes, cluster.gpus_per_node) == (2, 4)
    assert (layout.sharding, layout.keep_gathered) == ("hybrid", gathered)
