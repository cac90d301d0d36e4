"""The performance model (training/plan.py): its traffic, memory and time arithmetic, its calibration
against the recorded measurements, the layout decision, and the worker placement it accepts."""

from __future__ import annotations

import json

import pytest

from training import plan
from training.hardware import GIB, GPUS, INSTANCE_TYPES
from training.metrics import flops_per_token
from tests.conftest import ROOT

QWEN = plan.MODELS["qwen2.5-1.5b"]
L4_SHAPE = plan.Workload(seq_len=2048, micro_batch=1, grad_accum=4, activation_checkpointing=True, loss_chunk_tokens=2048)
H200_SHAPE = plan.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False, loss_chunk_tokens=8192)
G6 = plan.cluster_of("g6.12xlarge", 2)
RESULTS = ROOT / "docs" / "bench-results"


def case(file: str, name: str) -> dict:
    return next(c for c in json.loads((RESULTS / file).read_text())["cases"] if c["name"] == name)


def test_built_in_shapes_are_the_models_own_counts():
    from training.model import builtin_config

    for name, shape in plan.MODELS.items():
        counted = plan.shape_of(builtin_config(name))
        assert (counted.layer_params, counted.root_params, counted.hidden, counted.vocab, counted.linear_in_out) == (
            shape.layer_params, shape.root_params, shape.hidden, shape.vocab, shape.linear_in_out)
    assert QWEN.params == 1_543_714_304


def test_flops_per_token_agree_with_the_metrics_module():
    assert QWEN.flops_per_token(2048) == flops_per_token(QWEN.params, 28, 12, 128, 2048)


def test_full_sharding_over_two_nodes_sends_every_gather_through_the_network():
    e = plan.estimate(QWEN, L4_SHAPE, G6, plan.Layout("full"))
    gathered = 2 * QWEN.layer_params * 2 * 4 + 2 * QWEN.root_params * 4  # layers twice per micro-batch, root once
    expected = (gathered + 4 * QWEN.params) * 7 / 8                     # plus the fp32 reduce-scatter, over 8 ranks
    assert e.inter_bytes == pytest.approx(expected) and e.intra_bytes == pytest.approx(expected)
    assert e.inter_bytes / 1e9 == pytest.approx(25.4, abs=0.1)  # the "about 25 GB per step"


def test_hybrid_sends_one_gradient_all_reduce_per_step_through_the_network():
    e = plan.estimate(QWEN, L4_SHAPE, G6, plan.Layout("hybrid"))
    assert e.inter_bytes == pytest.approx(2 * 4 * QWEN.params * 1 / 2)  # all-reduce of fp32 gradients over 2 nodes
    assert plan.estimate(QWEN, L4_SHAPE, G6, plan.Layout("hybrid", reduce_dtype="bf16")).inter_bytes == pytest.approx(
        e.inter_bytes / 2)


def test_keeping_weights_gathered_gathers_once_per_step():
    kept = plan.estimate(QWEN, L4_SHAPE, G6, plan.Layout("full", keep_gathered=True))
    assert kept.inter_bytes == pytest.approx((2 * QWEN.params + 4 * QWEN.params) * 7 / 8)


def test_times_follow_the_calibrated_link():
    e = plan.estimate(QWEN, L4_SHAPE, G6, plan.Layout("full"))
    link = INSTANCE_TYPES["g6.12xlarge"].network_gbps * plan.CALIBRATION.link_efficiency
    assert e.inter_s == pytest.approx(e.inter_bytes / (link * 1e9))
    assert e.step_s >= max(e.compute_s, e.inter_s) and e.bound == "inter-node link-bound"


def test_one_node_has_no_network_traffic():
    one = plan.cluster_of("g6.12xlarge", 1)
    e = plan.estimate(QWEN, L4_SHAPE, one, plan.Layout("full"))
    assert e.inter_bytes == 0 and e.inter_s == 0 and e.intra_bytes > 0
    assert {x.layout.sharding for x in plan.rank_layouts(QWEN, L4_SHAPE, one)} == {"full"}


@pytest.mark.parametrize("file,name,workload,layout,measured_key", [
    ("2026-11-30-h200x2-full.json", "trainer, h200 profile (default)", H200_SHAPE, plan.Layout("full", True), "peak_mem_gib"),
    ("2026-11-30-h200x2-variants.json", "trainer, activation checkpointing",
     plan.Workload(4096, 8, 1, True, 8192), plan.Layout("full", True), "peak_mem_gib"),
    ("2026-11-30-h200x2-l4.json", "trainer, l4 profile, capped at 22 GiB", L4_SHAPE, plan.Layout("full"), "peak_mem_gib"),
])
def test_memory_model_reproduces_the_measured_peaks(file, name, workload, layout, measured_key):
    measured = case(file, name)[measured_key]
    modelled = plan.memory_bytes(QWEN, workload, layout, shard=2, calibration=plan.CALIBRATION) / GIB
    assert modelled == pytest.approx(measured, rel=0.06)


def test_measured_efficiencies_are_the_recorded_ones():
    efficiency = plan.CALIBRATION.measured_efficiency
    assert efficiency[("H200", 2048, 1, True)] == pytest.approx(
        case("2026-11-30-h200x2-l4.json", "trainer, l4 profile, capped at 22 GiB")["mfu_measured"], abs=0.005)
    assert efficiency[("H200", 4096, 8, False)] == pytest.approx(
        case("2026-11-30-h200x2-full.json", "trainer, h200 profile (default)")["mfu_measured"], abs=0.005)


def test_on_two_g6_nodes_hybrid_is_chosen_and_over_2_5_times_faster_than_full():
    chosen = plan.choose(QWEN, L4_SHAPE, G6)
    full = plan.estimate(QWEN, L4_SHAPE, G6, plan.Layout("full"))
    assert chosen.layout == plan.Layout("hybrid") and chosen.fits
    assert full.step_s / chosen.step_s > 2.5


def test_a_layout_that_does_not_fit_is_never_chosen_over_one_that_does():
    no_recompute = plan.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False)
    ranked = plan.rank_layouts(QWEN, no_recompute, G6)
    assert not any(e.fits for e in ranked)  # 8 x 4096 without recomputation needs ~60 GiB of activations
    chosen = plan.choose(QWEN, no_recompute, G6)
    assert chosen.memory_gib == min(e.memory_gib for e in ranked if e.layout.reduce_dtype == "fp32" and not e.layout.keep_gathered)


def test_run_cost_is_time_times_the_clusters_price():
    e = plan.choose(QWEN, L4_SHAPE, G6)
    assert e.run_usd == pytest.approx(2 * INSTANCE_TYPES["g6.12xlarge"].usd_per_hour * e.step_s * 200 / 3600)


def test_summary_line_says_what_the_deployment_will_do():
    line = plan.summary_line(QWEN, L4_SHAPE, G6, plan.choose(QWEN, L4_SHAPE, G6))
    assert line.startswith("2 x g6.12xlarge, hybrid: inter-node link-bound, ~2,") and "200 steps in ~" in line


# ------------------------------------------------------------------ where Ray put the workers, and auto


@pytest.mark.parametrize("nodes,expected", [
    (["a"] * 4, (1, 4)),
    (["a"] * 4 + ["b"] * 4, (2, 4)),
    (["n1", "n2", "n3"], (3, 1)),
])
def test_node_layout(nodes, expected):
    assert plan.node_layout(nodes) == expected


@pytest.mark.parametrize("nodes,message", [
    (["a", "a", "a", "b"], r"uneven placement: \{'a': 3, 'b': 1\} workers per node"),
    (["a", "b", "a", "b"], r"ranks of node a are not consecutive"),
])
def test_uneven_or_interleaved_placement_is_refused(nodes, message):
    with pytest.raises(plan.LayoutError, match=message):
        plan.node_layout(nodes)


def test_resolve_sharding():
    l4 = GPUS["L4"]
    assert plan.resolve_sharding("full", QWEN, L4_SHAPE, 2, 4, l4, "g6.12xlarge", False, "fp32") == ("full", "as set")
    assert plan.resolve_sharding("auto", QWEN, L4_SHAPE, 1, 4, l4, "g6.12xlarge", False, "fp32")[0] == "full"
    sharding, why = plan.resolve_sharding("auto", QWEN, L4_SHAPE, 2, 4, l4, "g6.12xlarge", False, "fp32")
    assert sharding == "hybrid" and why.startswith("fastest that fits on 2 x g6.12xlarge")
    assert plan.resolve_sharding("auto", QWEN, L4_SHAPE, 2, 4, l4, None, False, "fp32")[0] == "hybrid"
    # Without recomputation at 8 x 4096 a node's 24 GB GPUs cannot hold a hybrid shard: full spreads the state wider.
    big = plan.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False)
    sharding, why = plan.resolve_sharding("auto", QWEN, big, 2, 1, l4, None, False, "fp32")
    assert sharding == "full" and "cannot hold the sharded state" in why


def test_plan_cli_prints_every_layout(capsys):
    assert plan.main(["--instance-type", "g6.12xlarge", "--nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n| hybrid") + out.count("\n| full") == 8
    assert "auto (fp32 reduction, weights resharded): 2 x g6.12xlarge, hybrid" in out


@pytest.mark.parametrize("argv,message", [
    (["--instance-type", "m7i.xlarge"], "error: --instance-type: 'm7i.xlarge' is not a GPU type of the table"),
    (["--model", "gpt2"], "error: --model: 'gpt2' has no known shape"),
    (["--nodes", "0"], "error: --nodes and --steps must be at least 1"),
])
def test_plan_cli_refuses_bad_input_in_one_line(argv, message, capsys):
    assert plan.main(argv) == 2
    assert capsys.readouterr().err.startswith(message)


def test_reductions_move_only_in_the_last_micro_batchs_backward():
    """A longer accumulation hides the weight gathers behind more compute, but not the gradient
    all-reduce: it waits for the last micro-batch (the sockets emulation, docs/benchmarks.md)."""
    short, long = (plan.Workload(seq_len=2048, micro_batch=1, grad_accum=m, activation_checkpointing=True) for m in (1, 16))
    hybrid = [plan.estimate(QWEN, w, G6, plan.Layout("hybrid")) for w in (short, long)]
    tail = 2 * 4 * QWEN.params * 0.5 / (G6.inter_node_gbps * plan.CALIBRATION.link_efficiency * 1e9)
    assert hybrid[1].step_s - hybrid[1].compute_s == pytest.approx(tail - hybrid[1].compute_s * 0.75 / 16, rel=0.05)


def test_weights_kept_gathered_are_gathered_in_the_first_forward_only():
    work = plan.Workload(seq_len=2048, micro_batch=1, grad_accum=8, activation_checkpointing=True)
    kept = plan.estimate(QWEN, work, G6, plan.Layout("full", keep_gathered=True))
    gathers = (2 * QWEN.params) * (7 / 8) / (G6.inter_node_gbps * plan.CALIBRATION.link_efficiency * 1e9)
    assert kept.step_s > gathers + kept.compute_s * (1 - 0.25 / 8 - 0.75 / 8)


def test_usable_memory_is_the_datasheet_gigabytes_less_the_runtimes_share():
    """Datasheets give GPU memory in GB (10^9 bytes): an L4 has 24 GB = 24,000,000,000 bytes; less 1.5 GiB
    (1,610,612,736 bytes) for the CUDA context, cuBLAS and NCCL, the allocator has 22,389,387,264 bytes."""
    from training.hardware import GPUS
    from training.plan import usable_bytes

    assert usable_bytes(GPUS["L4"]) == 22_389_387_264
    assert usable_bytes(GPUS["H100"]) == 78_389_387_264  # 80,000,000,000 - 1,610,612,736
