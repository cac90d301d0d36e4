"""benchmarks/report.py: the peak the MFU is measured against, the bf16-reduction comparison, the accumulation
table and the order of the report's rows, with figures worked by hand."""

from __future__ import annotations

import json

import pytest

from benchmarks import report, suites


def row(name: str, group: str = "main", **extra) -> dict:
    return {"name": name, "recipe": "trainer", "group": group, "world_size": 2, "levers": [],
            "settings": {"micro_batch": 1, "seq_len": 4, "grad_accum": 1, "reduce_dtype": "fp32"},
            "tokens_per_step_per_gpu": 4, "step_time_s": 0.5, "flops_per_token": 1e9, "peak_mem_gib": 1.0} | extra


def test_the_measured_peak_is_the_median_of_the_ranks_8192_cubes(tmp_path):
    (tmp_path / "results").mkdir()
    ranks = [{"8192x8192x8192": 500.0, "qkv": 1.0}, {"8192x8192x8192": 700.0, "qkv": 2.0}, {"8192x8192x8192": 600.0}]
    (tmp_path / "results" / "matmul.json").write_text(json.dumps({"per_rank": ranks, "device": "H"}))
    assert report.measured_peak_tflops(tmp_path)[0] == 600.0
    assert report.measured_peak_tflops(tmp_path / "none") == (None, None)


def test_the_bf16_reduction_is_compared_with_fp32_over_the_curves_last_quarter():
    """Eight steps: the last quarter is the last two. fp32 4 3 2 1 1 1 1 1, bf16 4 3 2 1.5 1 1 1.2 1.4: largest gap 0.5
    (step 4), the last two steps' means 1.0 and 1.3."""
    fp32, bf16 = [4.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0], [4.0, 3.0, 2.0, 1.5, 1.0, 1.0, 1.2, 1.4]
    rows = [row("a", "reduce-dtype-loss", losses=fp32),
            row("b", "reduce-dtype-loss", losses=bf16, settings={**row("b")["settings"], "reduce_dtype": "bf16"}),
            row("c", "main", losses=[9.0] * 8, settings={**row("c")["settings"], "reduce_dtype": "bf16"})]
    assert report.reduce_dtype_comparison(rows) == (
        "bf16 against fp32 gradient reduction over 8 steps (pattern data): loss 4.0000 -> 1.0000 (fp32) and "
        "4.0000 -> 1.4000 (bf16); largest gap 0.5000, mean of the last 2 steps 1.0000 vs 1.3000")


def test_no_bf16_reduction_comparison_without_both_curves_or_with_an_error():
    fp32 = row("a", "reduce-dtype-loss", losses=[1.0, 1.0, 1.0, 1.0])
    bf16 = row("b", "reduce-dtype-loss", losses=[1.0, 1.0, 1.0, 1.0], settings={**row("b")["settings"], "reduce_dtype": "bf16"})
    assert report.reduce_dtype_comparison([fp32]) is None
    assert report.reduce_dtype_comparison([fp32, bf16 | {"error": "out of memory"}]) is None


def test_an_accumulation_case_reports_its_last_quarter_and_validation_loss(tmp_path):
    """Twelve steps 12 .. 1: the last quarter (3, 2, 1) means 2.0 (a third would be 2.5). Cases of other groups or
    with errors: no line."""
    rows = [row("x", "accumulation-loss", losses=[float(k) for k in range(12, 0, -1)], val_loss=1.25),
            row("y", "accumulation-loss", losses=[1.0] * 8, error="out of memory"),
            row("z", "main", losses=[1.0] * 8)]
    assert report.accumulation_comparison(rows, tmp_path) == [
        "x: loss 12.0000 -> 1.0000, mean of the last 3 steps 2.0000, validation loss 1.2500"]


def test_the_report_lists_the_cases_in_the_plans_order_not_the_files(tmp_path):
    """Result files sort as 'a-…' before 'b-…', but the plan runs group b's case first; matmul.json and the link
    figures are no cases."""
    results = tmp_path / "results"
    results.mkdir()
    for name, group in (("first", "b"), ("second", "a")):
        (results / f"{group}-{name}.json").write_text(json.dumps(row(name, group)))
    (results / "links-a.json").write_text(json.dumps({}))
    groups = [suites.Group("b", 2, [suites.Case("first")]), suites.Group("a", 2, [suites.Case("second")])]
    table = report.report(tmp_path, groups, 2)
    lines = [line for line in table.splitlines() if line.startswith("| first") or line.startswith("| second")]
    assert [line.split(" | ")[0] for line in lines] == ["| first", "| second"]
    assert [r["name"] for r in json.loads((tmp_path / "results.json").read_text())["cases"]] == ["first", "second"]


@pytest.mark.parametrize("grad_accum, shape", [(1, "1 x 2048"), (4, "1 x 2048 x 4 accum")])
def test_the_tables_shape_column_names_the_micro_batches_a_step_accumulates(grad_accum, shape):
    settings = {"micro_batch": 1, "seq_len": 2048, "grad_accum": grad_accum}
    summarized = report.summarize(row("l4", settings=settings, tokens_per_step_per_gpu=2048 * grad_accum), None, None)
    assert report.format_table([summarized]).splitlines()[2].startswith(f"| l4 | 2 | {shape} | ")
