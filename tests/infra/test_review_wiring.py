"""tools/review.py's wiring: each planner call gets the RayJob's own options, in the planner's argument order."""

from __future__ import annotations

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
