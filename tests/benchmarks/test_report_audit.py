"""benchmarks/report.py: the comparisons' baseline is the main group's trainer default, wherever its row falls."""

from __future__ import annotations

from benchmarks import report
from tests.benchmarks.test_bench import example_row


def test_the_comparisons_baseline_is_the_main_groups_trainer_default_not_an_earlier_trainer_row():
    # A world1 row first (a results file that sorts ahead): the ratios still divide by the main group's default.
    rows = [report.summarize(r, 790.0, None) for r in (
        example_row(name="one GPU", group="world1", world_size=1, step_time_s=0.6),
        example_row(),
        example_row(name="example", recipe="example", step_time_s=6.5),
    )]
    lines = report.comparisons(rows)
    assert "trainer default / example: 10.0x tokens/s per GPU" in lines
    assert "scaling 1 -> 2 GPUs: 92.3% of one GPU's tokens/s per GPU" in lines
