"""benchmarks/suites.py: the cases and groups of the layouts, accumulation, LoRA and full suites, against the
layouts, meshes and shapes they are named after."""

from __future__ import annotations

import pytest

from benchmarks import suites


def settings(case: suites.Case) -> tuple:
    cfg = case.train_config(suites.BENCH_MODEL)
    return cfg.sharding, cfg.reshard_after_forward, cfg.reduce_dtype


def test_each_layout_case_builds_the_layout_it_is_named_after():
    """planning.workload.Layout's names: sharding, '+gathered' when the weights stay gathered (reshard_after_forward
    off: the h200 profile's default, not the l4 profile's), '+bf16' for a bf16 reduction."""
    [nvlink] = [g for g in suites.layout_groups() if g.name == "layouts-nvlink"]
    assert [(c.name, settings(c)) for c in nvlink.cases] == [
        ("l4 shape, full", ("full", True, "fp32")),
        ("l4 shape, full+gathered", ("full", False, "fp32")),
        ("l4 shape, hybrid", ("hybrid", True, "fp32")),
        ("l4 shape, hybrid+bf16", ("hybrid", True, "bf16")),
        ("h200 shape, full", ("full", True, "fp32")),
        ("h200 shape, full+gathered", ("full", False, "fp32")),
        ("h200 shape, hybrid+gathered", ("hybrid", False, "fp32")),
    ]


def test_the_layouts_run_at_world_size_2_as_two_one_gpu_nodes_over_nvlink_and_sockets():
    groups = {g.name: g for g in suites.plan("layouts", gpus=2)}
    assert {name: (g.world_size, g.gpus_per_node, g.emulated_nodes, g.env, g.measure_links) for name, g in groups.items()} == {
        "layouts-nvlink": (2, 1, 2, {}, True),
        "layouts-sockets": (2, 1, 2, suites.SOCKETS_ENV, True),
        "reduce-dtype-loss": (2, 1, 2, {}, False)}
    assert [c.name for c in groups["layouts-sockets"].cases] == [f"{c.name}, sockets" for c in groups["layouts-nvlink"].cases]
    assert [settings(c) for c in groups["layouts-sockets"].cases] == [settings(c) for c in groups["layouts-nvlink"].cases]
    assert [settings(c) for c in groups["reduce-dtype-loss"].cases] == [("hybrid", True, "fp32"), ("hybrid", True, "bf16")]


def test_one_gpu_has_no_layouts_and_only_the_one_gpu_accumulation_group():
    assert suites.plan("layouts", gpus=1) == []
    assert [g.name for g in suites.plan("accumulation", gpus=1)] == ["accumulation-one-gpu"]


@pytest.mark.parametrize("world, gpus_per_node, nodes", [(2, 1, 2), (8, 4, 2), (8, 2, 4), (4, None, 1)])
def test_a_groups_emulated_nodes_are_its_gpus_over_the_gpus_of_one_node(world, gpus_per_node, nodes):
    assert suites.Group("g", world, [], gpus_per_node=gpus_per_node).emulated_nodes == nodes


def test_each_accumulation_loss_case_reduces_and_accumulates_in_what_its_name_says():
    """bf16 accumulation (the trainer before the fix) is the legacy flag; the dtype on the wire is reduce_dtype."""
    [loss] = [g for g in suites.accumulation_groups() if g.name == "accumulation-loss"]
    seen = [(c.name.removesuffix(", pattern data"), c.train_config(suites.BENCH_MODEL).reduce_dtype,
             c.legacy_bf16_accumulation, c.train_config(suites.BENCH_MODEL).grad_accum) for c in loss.cases]
    assert seen == [(f"hybrid, {wire} on the wire, {accumulate} accumulation, grad_accum {accum}", wire, legacy, accum)
                    for accum in (4, 16) for wire, accumulate, legacy in (("fp32", "fp32", False), ("bf16", "fp32", False),
                                                                          ("bf16", "bf16", True))]
    assert {(c.train_config(suites.BENCH_MODEL).sharding, c.evaluate_batches) for c in loss.cases} == {("hybrid", 8)}


def test_the_accumulation_speed_cases_time_each_layout_at_its_settings_on_both_links():
    groups = {g.name: g for g in suites.accumulation_groups()}
    want = [(f"{layout}, {wire} on the wire, grad_accum {accum}", layout_settings, wire, accum)
            for layout, layout_settings in (("hybrid", ("hybrid", True)), ("full+gathered", ("full", False)))
            for accum in (4, 16) for wire in ("fp32", "bf16")]
    for name, suffix, env in (("accumulation-nvlink", ", NVLink", {}), ("accumulation-sockets", ", sockets",
                                                                         suites.SOCKETS_ENV)):
        group = groups[name]
        assert (group.world_size, group.gpus_per_node, group.env) == (2, 1, env)
        got = [(c.name, settings(c)[:2], settings(c)[2], c.train_config(suites.BENCH_MODEL).grad_accum) for c in group.cases]
        assert got == [(f"{n}{suffix}", s, w, a) for n, s, w, a in want]


def test_lora_cases_recompute_only_the_7b_model_at_the_h200_profile_and_cap_every_l4_case():
    groups = {g.name: g for g in suites.plan("lora", gpus=2)}
    speed = [(c.model, c.train_config(c.model).lora_rank, c.train_config(c.model).activation_checkpointing)
             for c in groups["lora-speed"].cases]
    assert speed == [("qwen2.5-1.5b", 0, "none"), ("qwen2.5-1.5b", 16, "none"),
                     ("qwen2.5-7b", 0, "full"), ("qwen2.5-7b", 16, "full")]
    assert {(c.profile, c.memory_cap_gib) for c in groups["lora-l4"].cases} == {("l4", 22.0)}
    assert [(c.model, c.overrides["lora_rank"]) for c in groups["lora-l4"].cases] == [
        ("qwen2.5-1.5b", 0), ("qwen2.5-1.5b", 16), ("qwen2.5-7b", 0), ("qwen2.5-7b", 16)]


@pytest.mark.parametrize("gpus, l4_worlds", [(1, [1]), (2, [2]), (3, [2, 3]), (8, [2, 8])])
def test_the_full_suite_runs_the_l4_profile_at_world_size_2_and_at_every_gpu(gpus, l4_worlds):
    groups = [g for g in suites.plan("full", gpus) if g.name.startswith("l4-world")]
    assert [(g.name, g.world_size) for g in groups] == [(f"l4-world{w}", w) for w in l4_worlds]


def test_the_80gb_fp8_suite_leaves_rowwise_out_and_times_every_other_fp8_lever_at_4_x_4096():
    """At 4 x 4096 rowwise is profiled instead (benchmarks.kernel_profile); the h200-profile fp8 suite times it."""
    levers = {suite: [(c.levers, c.train_config(suites.BENCH_MODEL).micro_batch)
                      for c in {g.name: g for g in suites.plan(suite, gpus=2)}["main"].cases if c.levers]
              for suite in ("fp8", "fp8-80gb")}
    assert levers["fp8-80gb"] == [(("fp8-bf16-all-gather",), 4), (("fp8-kv",), 4), (("coordinate-descent",), 4),
                                  (("max-autotune",), 4)]
    assert levers["fp8"] == [(("fp8-bf16-all-gather",), 8), (("fp8-kv",), 8), (("coordinate-descent",), 8),
                             (("max-autotune",), 8), (("fp8-rowwise",), 8)]


def test_the_mfu_suites_l4_step_group_runs_every_case_at_the_l4_profile():
    [group] = [g for g in suites.plan("mfu", gpus=2) if g.name == "l4-step"]
    assert [(c.profile, c.levers, c.train_config(suites.BENCH_MODEL).grad_accum) for c in group.cases] == [
        ("l4", (), 4), ("l4", ("read-after-update", "transformers-masks"), 4), ("l4", ("no-automatic-gc",), 4)]


def test_the_one_gpu_accumulation_group_measures_the_peak_and_times_each_accumulation_and_recomputation():
    [group] = suites.plan("accumulation", gpus=1)
    assert (group.world_size, group.measure_matmul) == (1, True)
    shapes = [(c.train_config(suites.BENCH_MODEL).micro_batch, c.train_config(suites.BENCH_MODEL).grad_accum,
               c.train_config(suites.BENCH_MODEL).activation_checkpointing) for c in group.cases]
    assert shapes == [(1, 1, "full"), (1, 4, "full"), (1, 16, "full"), (4, 1, "none"), (4, 1, "selective"), (4, 1, "full")]
