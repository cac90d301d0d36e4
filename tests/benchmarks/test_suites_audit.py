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
