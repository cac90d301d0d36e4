"""benchmarks/suites.py: the example recipe's three shapes, each the shape its name says (the example's own
1 x 128, the h200 profile's 8 x 4096, and its 4096 tokens at the example's micro-batch of 1)."""

from __future__ import annotations

import pytest

from benchmarks import suites


@pytest.mark.parametrize("suite", ["full", "variants"])
def test_the_example_recipe_runs_at_its_shape_ours_and_our_sequence_length(suite):
    [main] = [g for g in suites.plan(suite, 8) if g.name == "main"]
    shapes = {c.name: c.overrides for c in main.cases if c.recipe == "example"}
    assert shapes == {"example recipe at its shape": {"micro_batch": 1, "seq_len": 128},
                      "example recipe at our shape": {"micro_batch": 8, "seq_len": 4096},
                      "example recipe at our sequence length": {"micro_batch": 1, "seq_len": 4096}}


SOCKETS = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}  # NCCL with P2P and SHM off: sockets only


@pytest.mark.parametrize("suite", ["full", "l4", "layouts", "accumulation"])
def test_every_sockets_group_turns_off_both_p2p_and_shared_memory(suite):
    sockets = [g for g in suites.plan(suite, 8) if "sockets" in g.name]
    assert sockets and all(g.env == SOCKETS for g in sockets)


def test_the_l4_suite_measures_the_matmul_peak_once_and_times_sockets_apart():
    groups = {g.name: (g.world_size, g.measure_matmul, g.env) for g in suites.plan("l4", 8)}
    assert groups == {"l4-world2": (2, True, {}), "l4-world2-sockets": (2, False, SOCKETS),
                      "l4-world8": (8, False, {}), "l4-world8-sockets": (8, False, SOCKETS)}


def test_the_smoke_suite_measures_the_matmul_peak_its_mfu_is_read_against():
    [main] = suites.plan("smoke", 1)
    assert main.measure_matmul and [c.recipe for c in main.cases] == ["trainer", "example"]
