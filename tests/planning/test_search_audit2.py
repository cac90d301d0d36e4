"""planning.search's boundaries and choices: the auto margin at its edge, the least-memory shape, and the run-time
words."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planning import search, timing, workload
from planning.hardware import GIB
from planning.memory import usable_bytes

QWEN = workload.MODELS["qwen2.5-1.5b"]
L4_SHAPE = workload.Workload(seq_len=2048, micro_batch=1, grad_accum=4, activation_checkpointing="full",
                             loss_chunk_tokens=2048)
G6 = workload.cluster_of("g6.12xlarge", 2)


@pytest.mark.parametrize("over_bytes,fits", [(-1024, True), (0, True), (1024, False)])
def test_auto_fits_up_to_and_including_ninety_percent_of_the_usable_memory(over_bytes, fits):
    # AUTO_MEMORY_MARGIN: auto leaves 10% of the usable memory free; a shape at exactly 90% fits, a KiB more does not.
    # Dividing by GIB and multiplying back is exact (a power of two).
    at = SimpleNamespace(memory_gib=(usable_bytes(G6.gpu) * 0.9 + over_bytes) / GIB)
    assert search.auto_fits(at, G6) is fits


def test_smallest_is_the_least_memory_of_every_same_batch_shape_and_layout_not_the_fastest():
    fourteen = workload.MODELS["qwen2.5-14b"]
    every = [timing.estimate(fourteen, w, G6, workload.Layout(s)) for w in search.same_batch_shapes(L4_SHAPE)
             for s in workload.SHARDINGS]
    least = min(every, key=lambda e: e.memory_gib)
    assert least.step_s != min(e.step_s for e in every)  # the case tells the two orders apart
    found = search.smallest(fourteen, L4_SHAPE, G6)
    assert (found.memory_gib, found.layout, found.work) == (least.memory_gib, least.layout, least.work)


@pytest.mark.parametrize("seconds,words", [(59 * 60, "59 min"), (119 * 60, "119 min"), (120 * 60, "2.0 h"),
                                           (150 * 60, "2.5 h")])
def test_a_run_under_two_hours_is_said_in_minutes_and_from_two_hours_in_hours(seconds, words):
    assert search.run_duration(seconds) == words


def test_a_faster_shape_inside_the_usable_memory_but_not_the_auto_margin_is_named_too_big():
    # 2 x 2,048 per GPU on one g6.12xlarge: no recomputation needs ~19.1 GiB, within the 20.85 GiB usable but over
    # the 18.77 GiB auto allows (90%); auto trains with recomputation and names the faster shape it left out.
    one = workload.cluster_of("g6.12xlarge", 1)
    work = workload.Workload(2048, 2, 1, "full", 2048)
    chosen = search.choose(QWEN, work, one, reduce_dtype="bf16", shapes=True)
    line = search.auto_line(QWEN, work, one, chosen, search.SHAPE_OPTIONS)
    faster = line.split("; faster but too big: ")[1]
    assert faster.startswith("full+bf16, micro-batch 2 x 1 accumulation, no recomputation (")
    needs = float(faster.split(", ")[-1].split(" GiB")[0])
    assert 0.9 * 20.85 < needs <= 20.85


def test_one_node_asked_for_hybrid_gets_full_sharding_by_its_name():
    # One node has no replicas across nodes: a hybrid mesh of one node is full sharding.
    one = workload.cluster_of("g6.12xlarge", 1)
    assert search.choose(QWEN, L4_SHAPE, one, shardings=("hybrid",)).layout.sharding == "full"


def test_the_larger_batchs_steps_for_the_same_tokens_round_up():
    """3 steps of 65,536 tokens = 196,608 tokens; at the 131,072-token batch that keeps the links at most 10% of the
    step (test_plan's worked case) they take 1.5 steps: 2, not 1."""
    import dataclasses

    work = dataclasses.replace(L4_SHAPE, steps=3)
    line = search.batch_line(QWEN, work, G6, search.choose(QWEN, work, G6, reduce_dtype="bf16"))
    assert "from batch_tokens 131,072 " in line and "the same 196,608 tokens in 2 steps" in line
