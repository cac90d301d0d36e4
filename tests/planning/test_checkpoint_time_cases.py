"""planned_stop, the grace period's default as the stack reads it from the RayJob's options, and the review line's
spot comparison (planning/checkpoint_time.py), as worked examples."""

from __future__ import annotations

import pytest

from planning.checkpoint_time import SPOT_NOTICE_S, StopEstimate, planned_stop
from planning.workload import MODELS

# The default run as the RayJob passes it: Qwen2.5-1.5B on 2 x g6.12xlarge (8 L4s), a 2.109 s predicted step.
DEFAULT_RUN = {"model": "Qwen/Qwen2.5-1.5B", "instance_type": "g6.12xlarge", "workers": 8,
               "predicted_step_seconds": 2.109}


def test_the_planned_stop_of_the_default_run_is_its_9_75_gb_a_node_after_its_predicted_step():
    """Qwen2.5-1.5B's 19.5 GB checkpoint over 2 nodes, after the 2.109 s step the planner predicted."""
    found = planned_stop(DEFAULT_RUN, {})
    assert found.bytes_per_node == pytest.approx(9.75e9, rel=0.01)
    assert found.step_s == 2.109


def test_the_planned_stop_of_a_lora_run_saves_the_adapters_and_the_bf16_base():
    """Rank 16: 12 bytes per adapter parameter and 2 per frozen base weight (x 19.5/18.5), half a node each: about
    1.7 GB a node, not the full run's 9.75 GB (the LoRA rank must reach the estimate)."""
    shape = MODELS["qwen2.5-1.5b"]
    adapters = 16 * shape.linear_in_out * shape.layers
    found = planned_stop(DEFAULT_RUN | {"lora_rank": 16}, {})
    assert found.bytes_per_node == pytest.approx((12 * adapters + 2 * shape.params) * 19.5 / 18.5 / 2, rel=0.001)


@pytest.mark.parametrize("change", [{"predicted_step_seconds": None}, {"instance_type": None}, {"workers": 6}],
                         ids=["no predicted step", "unknown instance type", "not whole nodes"])
def test_without_a_predicted_step_or_a_known_cluster_there_is_no_planned_stop(change):
    """The stack then falls back to FALLBACK_GRACE_S rather than estimating from a step it does not know."""
    assert planned_stop(DEFAULT_RUN | change, {}) is None


@pytest.mark.parametrize("step_s,grace_s,where", [(89.0, 120, "within"), (89.1, 130, "beyond")])
def test_the_line_says_within_a_spot_interruption_up_to_exactly_its_two_minutes(step_s, grace_s, where):
    """89 s + 1 s commit + 30 s margin = 120 s, the spot notice itself: within; a tenth more rounds to 130: beyond."""
    found = StopEstimate(bytes_per_node=0, step_s=step_s, write_s=0.0, upload_s=0.0)
    assert found.grace_s == grace_s
    assert f"{where} a spot interruption's {SPOT_NOTICE_S} s" in found.line()
