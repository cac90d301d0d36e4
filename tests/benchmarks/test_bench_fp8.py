"""The benchmark's fp8 suites without a GPU: what they run, and how their report reads
the rows (figures in the fixtures are worked by hand)."""

from __future__ import annotations

from benchmarks import levers, report, suites, worker


def row(name: str, recipe: str = "trainer", precision: str = "bf16", group: str = "main", **extra) -> dict:
    return {"name": name, "recipe": recipe, "group": group, "levers": extra.pop("levers", []),
            "settings": {"precision": precision}} | extra


def test_fp8_suite_runs_bf16_fp8_and_each_fp8_lever_alone_and_both_peers_as_valid_configs():
    groups = {g.name: g for g in suites.plan("fp8", gpus=1)}
    main = groups["main"].cases
    configs = [c.train_config(suites.BENCH_MODEL) for c in main]
    assert [c.precision for c in configs] == ["bf16"] + ["fp8"] * 3 + ["bf16"] + ["fp8"] * 4
    assert [c.micro_batch for c in configs] == [8, 8, 12, 16, 12, 8, 8, 8, 8]
    assert [c.levers for c in main] == [(), (), (), (), (), ("fp8-kv",), ("coordinate-descent",), ("max-autotune",),
                                        ("fp8-rowwise",)]
    assert groups["main"].measure_matmul
    peers = groups["peer"].cases
    assert [c.recipe for c in peers] == ["liger", "fp8-peer", "liger"]
    assert [c.train_config(suites.BENCH_MODEL).micro_batch for c in peers] == [8, 8, 12]
    assert all(name in levers.LEVERS for c in main for name in c.levers)


def test_the_80gb_fp8_suite_runs_bf16_and_the_bf16_peer_at_fp8s_larger_micro_batch_too():
    # Part of fp8's gain at 6 x 4096 could be the micro-batch alone: bf16 and the Liger peer run there as well.
    groups = {g.name: g for g in suites.plan("fp8-80gb", gpus=1)}
    shapes = [(c.train_config(suites.BENCH_MODEL).precision, c.recipe, c.train_config(suites.BENCH_MODEL).micro_batch)
              for g in groups.values() for c in g.cases if not c.levers]
    assert shapes == [("bf16", "trainer", 4), ("fp8", "trainer", 4), ("fp8", "trainer", 6), ("bf16", "trainer", 6),
                      ("bf16", "liger", 4), ("bf16", "fp8-peer", 4), ("bf16", "liger", 6)]


def test_the_fp8_suite_compares_float8_and_bf16_all_gather_where_weights_travel():
    one, two = ([c.levers for c in {g.name: g for g in suites.plan("fp8", gpus)}["main"].cases] for gpus in (1, 2))
    assert ("fp8-bf16-all-gather",) not in one and two[2] == ("fp8-bf16-all-gather",)


def test_fp8_report_gives_mfu_against_the_fp8_peak_and_speed_over_bf16_and_the_best_peer():
    rows = [row("bf16", tokens_per_s_per_gpu=50_000.0, tflops_per_gpu=500.0),
            row("fp8", precision="fp8", tokens_per_s_per_gpu=60_000.0, tflops_per_gpu=600.0),
            row("liger peer", recipe="liger", group="peer", tokens_per_s_per_gpu=48_000.0, tflops_per_gpu=480.0)]
    matmul = {"per_rank": [{worker.FP8_CUBE: 1200.0}]}
    mfu, speed = report.fp8_lines(rows, matmul, "NVIDIA H200")
    # 600 / 1200 measured = 50.0%; 600 / 1979 (H200 datasheet, dense FP8) = 30.3%.
    assert "fp8 50.0% / 30.3%" in mfu and "bf16 41.7% / 25.3%" in mfu
    # 60,000 / 50,000 = 1.2; 60,000 / 48,000 = 1.25.
    assert speed == "fp8: 1.200x the bf16 default, 1.250x the best bf16 peer (liger peer)"


def test_fp8_report_says_nothing_without_fp8_cases():
    assert report.fp8_lines([row("bf16", tokens_per_s_per_gpu=1.0, tflops_per_gpu=1.0)], None, "NVIDIA H200") == []


def test_the_best_bf16_peer_is_the_fastest_of_several():
    rows = [row("fp8", precision="fp8", tokens_per_s_per_gpu=60_000.0, tflops_per_gpu=600.0),
            row("example peer", recipe="example", group="peer", tokens_per_s_per_gpu=40_000.0, tflops_per_gpu=400.0),
            row("liger peer", recipe="liger", group="peer", tokens_per_s_per_gpu=48_000.0, tflops_per_gpu=480.0)]
    _, speed = report.fp8_lines(rows, None, "NVIDIA H200")
    # 60,000 / 48,000 = 1.25 (liger, the faster peer); the slower one would give 1.5.
    assert speed == "fp8: 1.250x the best bf16 peer (liger peer)"


def test_a_default_row_that_does_not_name_its_precision_is_the_bf16_default():
    # Rows written before the precision setting existed leave it out; they ran in bf16, the trainer's default.
    default = row("bf16", tokens_per_s_per_gpu=50_000.0, tflops_per_gpu=500.0)
    del default["settings"]["precision"]
    rows = [default, row("fp8", precision="fp8", tokens_per_s_per_gpu=60_000.0, tflops_per_gpu=600.0)]
    assert report.fp8_lines(rows, None, "NVIDIA H200")[1:] == ["fp8: 1.200x the bf16 default"]
