"""benchmarks/suites.py's wiring: what each group of the layouts and accumulation suites measures beside its cases."""

from __future__ import annotations

import pytest

from benchmarks import suites


@pytest.mark.parametrize("suite, expected", [
    # The emulation (report.emulation_rows) reads each group's own link measurement; the NVLink group also gives
    # the matmul peak the MFU columns are taken against. Every 2-GPU group is two emulated one-GPU nodes.
    ("layouts", {"layouts-nvlink": (True, True, 1, False), "layouts-sockets": (True, False, 1, True),
                 "reduce-dtype-loss": (False, False, 1, False)}),
    ("accumulation", {"accumulation-loss": (False, False, 1, False), "accumulation-nvlink": (True, False, 1, False),
                      "accumulation-sockets": (True, False, 1, True), "accumulation-one-gpu": (False, True, None, False)}),
])
def test_each_group_measures_links_and_matmul_as_its_report_needs(suite, expected):
    groups = {g.name: (g.measure_links, g.measure_matmul, g.gpus_per_node, g.env == suites.SOCKETS_ENV)
              for g in suites.plan(suite, gpus=2)}
    assert groups == expected


def test_the_accumulation_loss_cases_run_300_steps_of_pattern_data_from_one_seed():
    """bench --help: 'accumulation: fp32 vs bf16 gradient accumulation and reduction, 300 steps'."""
    [loss] = [g for g in suites.plan("accumulation", gpus=2) if g.name == "accumulation-loss"]
    configs = [c.train_config(suites.BENCH_MODEL) for c in loss.cases]
    assert {(c.steps, c.data, c.seed) for c in configs} == {(300, "pattern", configs[0].seed)}
    assert sorted(c.grad_accum for c in configs) == [4, 4, 4, 16, 16, 16]
