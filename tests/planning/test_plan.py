"""The performance model (planning/): its traffic, memory and time arithmetic, its calibration
against the recorded measurements, the layout decision, and the worker placement it accepts."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from planning import auto, calibration, memory, plan, search, timing, workload
from training import layout as placement
from planning.hardware import GIB, INSTANCE_TYPES
from training.gpus import GPUS
from training.metrics import flops_per_token
from tests.conftest import ROOT

QWEN = workload.MODELS["qwen2.5-1.5b"]
L4_SHAPE = workload.Workload(seq_len=2048, micro_batch=1, grad_accum=4, activation_checkpointing=True, loss_chunk_tokens=2048)
H200_SHAPE = workload.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False, loss_chunk_tokens=8192)
G6 = workload.cluster_of("g6.12xlarge", 2)
RESULTS = ROOT / "docs" / "bench-results"


def case(file: str, name: str) -> dict:
    return next(c for c in json.loads((RESULTS / file).read_text())["cases"] if c["name"] == name)


def test_built_in_shapes_are_the_models_own_counts():
    from training.model import builtin_config

    for name, shape in workload.MODELS.items():
        counted = workload.shape_of(builtin_config(name))
        assert (counted.layer_params, counted.root_params, counted.hidden, counted.vocab, counted.linear_in_out) == (
            shape.layer_params, shape.root_params, shape.hidden, shape.vocab, shape.linear_in_out)
    assert QWEN.params == 1_543_714_304


def test_flops_per_token_agree_with_the_metrics_module():
    assert QWEN.flops_per_token(2048) == flops_per_token(QWEN.params, 28, 12, 128, 2048)


def test_full_sharding_over_two_nodes_sends_every_gather_through_the_network():
    e = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("full"))
    gathered = 2 * QWEN.layer_params * 2 * 4 + 2 * QWEN.root_params  # layers twice per micro-batch, root once a step
    expected = (gathered + 4 * QWEN.params) * 7 / 8                  # plus the fp32 reduce-scatter, over 8 ranks
    assert e.inter_bytes == pytest.approx(expected) and e.intra_bytes == pytest.approx(expected)
    assert e.inter_bytes / 1e9 == pytest.approx(24.2, abs=0.1)  # DESIGN.md's "about 25 GB per step"


def test_hybrid_sends_one_gradient_all_reduce_per_step_through_the_network():
    e = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("hybrid"))
    assert e.inter_bytes == pytest.approx(2 * 4 * QWEN.params * 1 / 2)  # all-reduce of fp32 gradients over 2 nodes
    assert timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("hybrid", reduce_dtype="bf16")).inter_bytes == pytest.approx(
        e.inter_bytes / 2)


def test_keeping_weights_gathered_gathers_once_per_step():
    kept = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("full", keep_gathered=True))
    assert kept.inter_bytes == pytest.approx((2 * QWEN.params + 4 * QWEN.params) * 7 / 8)


def test_times_follow_the_calibrated_link():
    e = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("full"))
    link = INSTANCE_TYPES["g6.12xlarge"].network_gbps * calibration.CALIBRATION.link_efficiency
    assert e.inter_s == pytest.approx(e.inter_bytes / (link * 1e9))
    assert e.step_s >= max(e.compute_s, e.inter_s) and e.bound == "inter-node link-bound"


def test_one_node_has_no_network_traffic():
    one = workload.cluster_of("g6.12xlarge", 1)
    e = timing.estimate(QWEN, L4_SHAPE, one, workload.Layout("full"))
    assert e.inter_bytes == 0 and e.inter_s == 0 and e.intra_bytes > 0
    assert {x.layout.sharding for x in search.rank_layouts(QWEN, L4_SHAPE, one)} == {"full"}


@pytest.mark.parametrize("file,name,workload,layout,measured_key", [
    ("2026-11-30-h200x2-full.json", "trainer, h200 profile (default)", H200_SHAPE, workload.Layout("full", True), "peak_mem_gib"),
    ("2026-11-30-h200x2-variants.json", "trainer, activation checkpointing",
     workload.Workload(4096, 8, 1, True, 8192), workload.Layout("full", True), "peak_mem_gib"),
    ("2026-11-30-h200x2-l4.json", "trainer, l4 profile, capped at 22 GiB", L4_SHAPE, workload.Layout("full"), "peak_mem_gib"),
])
def test_memory_model_reproduces_the_measured_peaks(file, name, workload, layout, measured_key):
    measured = case(file, name)[measured_key]
    modelled = memory.memory_bytes(QWEN, workload, layout, shard=2, calibration=calibration.CALIBRATION) / GIB
    assert modelled == pytest.approx(measured, rel=0.06)


def test_efficiencies_are_the_recorded_tokens_per_second_over_the_recorded_matmul_peak():
    # The basis: each efficiency times the measured matmul peak gives back the measured model FLOP/s.
    full = json.loads((RESULTS / "2026-11-30-h200x2-full.json").read_text())
    assert calibration.CALIBRATION.matmul_peak_tflops["H200"] == pytest.approx(full["measured_peak_tflops"], abs=0.1)
    default = case("2026-11-30-h200x2-full.json", "trainer, h200 profile (default)")
    assert calibration.CALIBRATION.efficiency[(False, 32768)] * 788.3e12 / default["flops_per_token"] == pytest.approx(
        default["tokens_per_s_per_gpu"], rel=0.002)
    recompute = case("2026-11-30-h200x2-variants.json", "trainer, activation checkpointing")
    assert calibration.CALIBRATION.efficiency[(True, 32768)] * 788.3e12 / recompute["flops_per_token"] == pytest.approx(
        recompute["tokens_per_s_per_gpu"], rel=0.002)


def test_on_two_g6_nodes_hybrid_is_chosen_and_the_link_bounds_full():
    """full sends every micro-batch's gathers across the nodes: 8 gathers of 2.62 GB of bf16 layers, one of the
    0.47 GB root and one 6.17 GB fp32 reduction, 7/8 of each over the ring of 8 GPUs = 24.2 GB, 8.05 s at 60% of
    5 GB/s; hybrid crosses the nodes once per step with the gradient all-reduce: 6.2 GB, 2.1 s."""
    chosen = search.choose(QWEN, L4_SHAPE, G6)
    full = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("full"))
    assert chosen.layout == workload.Layout("hybrid") and chosen.fits
    assert full.inter_bytes / 1e9 == pytest.approx(24.2, abs=0.1) and full.step_s >= 24.2 / 3.0
    assert chosen.inter_bytes / 1e9 == pytest.approx(6.2, abs=0.1)
    assert full.step_s / chosen.step_s > 1.7


def test_a_layout_that_does_not_fit_is_never_chosen():
    no_recompute = workload.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False)
    assert not any(e.fits for e in search.rank_layouts(QWEN, no_recompute, G6))  # ~60 GiB of activations
    assert search.choose(QWEN, no_recompute, G6) is None
    with pytest.raises(auto.LayoutError, match=r"--activation-checkpointing: 8 x 4096 tokens per micro-batch without "
                       r"recomputation needs .* GiB/GPU on 2 x g6.12xlarge \(24 GB per GPU\); micro-batch 8 x 1 accumulation, "
                       r"full recomputation fits"):
        auto.resolve_sharding("auto", QWEN, no_recompute, 2, 4, GPUS["L4"], "g6.12xlarge", False, "fp32")


def test_run_cost_is_time_times_the_clusters_price():
    e = search.choose(QWEN, L4_SHAPE, G6)
    assert e.run_usd == pytest.approx(2 * INSTANCE_TYPES["g6.12xlarge"].usd_per_hour * e.step_s * 200 / 3600)


def test_summary_line_says_what_the_deployment_will_do():
    line = plan.summary_line(QWEN, L4_SHAPE, G6, search.choose(QWEN, L4_SHAPE, G6))
    assert line.startswith("2 x g6.12xlarge, hybrid, micro-batch 1 x 4 accumulation, full recomputation: inter-node "
                           "link-bound, ~1,")
    assert "200 steps in ~" in line


# ------------------------------------------------------------------ where Ray put the workers, and auto


@pytest.mark.parametrize("nodes,expected", [
    (["a"] * 4, (1, 4)),
    (["a"] * 4 + ["b"] * 4, (2, 4)),
    (["n1", "n2", "n3"], (3, 1)),
])
def test_node_layout(nodes, expected):
    assert placement.node_layout(nodes) == expected


@pytest.mark.parametrize("nodes,message", [
    (["a", "a", "a", "b"], r"uneven placement: \{'a': 3, 'b': 1\} workers per node"),
    (["a", "b", "a", "b"], r"ranks of node a are not consecutive"),
])
def test_uneven_or_interleaved_placement_is_refused(nodes, message):
    with pytest.raises(placement.LayoutError, match=message):
        placement.node_layout(nodes)


def test_resolve_sharding():
    l4 = GPUS["L4"]
    assert auto.resolve_sharding("full", QWEN, L4_SHAPE, 2, 4, l4, "g6.12xlarge", False, "fp32") == ("full", "as set")
    assert auto.resolve_sharding("auto", QWEN, L4_SHAPE, 1, 4, l4, "g6.12xlarge", False, "fp32")[0] == "full"
    sharding, why = auto.resolve_sharding("auto", QWEN, L4_SHAPE, 2, 4, l4, "g6.12xlarge", False, "fp32")
    assert sharding == "hybrid" and why.startswith("fastest that fits on 2 x g6.12xlarge")
    assert auto.resolve_sharding("auto", QWEN, L4_SHAPE, 2, 4, l4, None, False, "fp32")[0] == "hybrid"
    # Without recomputation at 8 x 4096 a node's 24 GB GPUs cannot hold a hybrid shard: full spreads the state wider.
    big = workload.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False)
    sharding, why = auto.resolve_sharding("auto", QWEN, big, 2, 1, l4, None, False, "fp32")
    assert sharding == "full" and "cannot hold the sharded state" in why


def test_plan_cli_prints_every_layout(capsys):
    assert plan.main(["--instance-type", "g6.12xlarge", "--nodes", "2", "--micro-batch", "1",
                      "--activation-checkpointing", "full", "--reduce-dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n| hybrid") + out.count("\n| full") == 8
    assert "\nauto: hybrid, micro-batch 1 x 4 accumulation, full recomputation: fastest that fits on 2 x g6.12xlarge" in out


@pytest.mark.parametrize("argv,message", [
    (["--instance-type", "m7i.xlarge"], "error: --instance-type: 'm7i.xlarge' is not a GPU type of the table"),
    (["--model", "gpt2"], "error: --model: 'gpt2' has no known shape"),
    (["--nodes", "0"], "error: --nodes and --steps must be at least 1"),
    # 2 x 4 L4s x 1 x 2,048 = 16,384 tokens per round of micro-batches: 40,000 lies between 2 and 3 rounds.
    (["--batch-tokens", "40000"], "error: --batch-tokens: 40,000 is not a multiple of 8 workers (--workers) x 1 sequences "
     "(--micro-batch) x 2,048 tokens (--seq-len) = 16,384 (at most 65,536 times); nearest valid: 32,768 or 49,152"),
])
def test_plan_cli_refuses_bad_input_in_one_line(argv, message, capsys):
    assert plan.main(argv) == 2
    assert capsys.readouterr().err.startswith(message)


def test_reductions_move_only_in_the_last_micro_batchs_backward():
    """A longer accumulation hides the weight gathers behind more compute, but not the gradient all-reduce: it waits
    for the last micro-batch (the sockets emulation, docs/benchmarks.md). Hybrid on 2 g6 nodes, 16 micro-batches of
    1 x 2048 with recomputation, 11.4373 s of L4 compute. The optimizer over a node's quarter of the model: 12.444 us
    per million parameters x 385.928576 million = 4.8025 ms on the H200, x 3,799 / 237.44 GB/s = 0.07684 s, after
    everything. A micro-batch: (11.4373 - 0.07684) / 16 = 0.71003 s; the head's 3 passes of 13.569% of the FLOPs
    (6 x 1,536 x 151,936 / 10,319,250,432) against the layers' 4: 10.534%, 0.07480 s; the layers' backward 3/4 of
    the other 0.63523 s = 0.47642 s, the last layer's 0.01701 s. The fp32 all-reduce, 2 x 4 B x 1,543,714,304 x 1/2
    at 60% of 5 GB/s = 2.05829 s, is the layers' 1.74712 s, which waits for the last layer's backward, and the
    root's 0.31117 s, which waits for all compute and for the root's reduce-scatter in the node (one tensor, so in
    series: 4 B x 233,373,696 x 3/4 at 60% of 32 GB/s = 0.03646 s). With the root's first gather (0.0182 s): exposed
    0.0182 + 0.01701 + 1.74712 - 0.47642 + 0.03646 + 0.31117 = 1.65354 s."""
    work = workload.Workload(seq_len=2048, micro_batch=1, grad_accum=16, activation_checkpointing=True)
    e = timing.estimate(QWEN, work, G6, workload.Layout("hybrid"))
    assert e.compute_s == pytest.approx(11.4373, rel=1e-4)
    assert e.exposed_s == pytest.approx(1.65354, rel=1e-4)


def test_the_bound_names_the_link_the_step_waits_on_not_the_busiest():
    """The case above: the in-node link carries more seconds (16 micro-batches' gathers) than the network, but hides
    them behind the compute; of the 1.65354 s exposed, only the root's first gather and its in-node reduce-scatter
    (0.0182 + 0.03646 s) are in-node, the rest waits on the network's all-reduce."""
    e = timing.estimate(QWEN, workload.Workload(2048, 1, 16, True, 2048), G6, workload.Layout("hybrid"))
    assert e.intra_s > e.inter_s and e.bound == "inter-node link-bound"


@pytest.mark.parametrize("model", ["qwen2.5-1.5b", "qwen2.5-7b", "tiny"])
@pytest.mark.parametrize("gpu", ["H200", "L4"])
def test_one_gpu_moves_nothing_so_its_step_is_its_compute(model, gpu):
    """No link, nothing in series: at every shape, short sequences where the optimizer outweighs a micro-batch and a
    small model whose head is most of its FLOPs included, the step is the compute alone."""
    one = workload.Cluster(gpu=GPUS[gpu], nodes=1, gpus_per_node=1, inter_node_gbps=0.0)
    for seq, micro, accum in ((128, 1, 1), (128, 1, 4), (256, 1, 1), (2048, 1, 4), (4096, 8, 1)):
        for recompute in ("none", "selective", "full"):
            for layout in (workload.Layout("full"), workload.Layout("full", keep_gathered=True)):
                e = timing.estimate(workload.MODELS[model], workload.Workload(seq, micro, accum, recompute, 2048), one, layout)
                assert e.step_s == pytest.approx(e.compute_s, rel=1e-9), (seq, micro, accum, recompute, layout.name)


def test_weights_kept_gathered_are_gathered_in_the_first_forward_only():
    work = workload.Workload(seq_len=2048, micro_batch=1, grad_accum=8, activation_checkpointing=True)
    kept = timing.estimate(QWEN, work, G6, workload.Layout("full", keep_gathered=True))
    gathers = (2 * QWEN.params) * (7 / 8) / (G6.inter_node_gbps * calibration.CALIBRATION.link_efficiency * 1e9)
    assert kept.step_s > gathers + kept.compute_s * (1 - 0.25 / 8 - 0.75 / 8)


# ------------------------------------------------------------------ the model against every H200 measurement

H200 = GPUS["H200"]
# busbw of the all-gather at one decoder layer's size over NCCL sockets (2026-11-30-h200x2-links-sockets.json).
SOCKETS_GBPS = 3.219
MISSES = {
    "run spread": "the same settings measured 1,783 tok/s in the layouts run: runs differ by 22%",
    "slower under compute": "over sockets the h200 shape's step outlasts its collectives, each timed alone in the same "
                            "run, by more than the compute that cannot overlap them (the test below): sent back to "
                            "back at the rate measured alone, all four such cases are 8-16% fast",
}


def h200_cluster(gpus: int, sockets: bool) -> workload.Cluster:
    """The bench's machine: one node of `gpus` H200s over NVLink, or two one-GPU "nodes" over NCCL sockets."""
    if sockets:
        return workload.Cluster(gpu=H200, nodes=2, gpus_per_node=1, inter_node_gbps=SOCKETS_GBPS / calibration.CALIBRATION.link_efficiency)
    return workload.Cluster(gpu=H200, nodes=1, gpus_per_node=gpus, inter_node_gbps=0.0)


L4S = (2048, 1, True, 2048)   # seq, micro-batch, recomputation, loss chunk
H2S = (4096, 8, False, 8192)
# (file, case, measured tok/s/GPU copied from it, GPUs, sockets, shape, grad_accum, layout, the miss it shows or None)
H200_CASES = [
    ("full", "trainer, h200 profile (default)", 50_397, 2, False, H2S, 1, "full+gathered", None),
    ("full", "trainer, l4 profile, memory capped at 22 GiB", 9_067, 2, False, L4S, 1, "full", None),
    ("full", "trainer, h200 profile (default), NCCL sockets only", 18_270, 2, True, H2S, 1, "full+gathered", "slower under compute"),
    ("full", "trainer, h200 profile (default), one GPU", 52_001, 1, False, H2S, 1, "full+gathered", None),
    ("l4", "trainer, l4 profile, capped at 22 GiB", 11_850, 2, False, L4S, 4, "full", None),
    ("l4", "trainer, l4 profile, capped at 22 GiB, NCCL sockets only", 2_170, 2, True, L4S, 4, "full", "run spread"),
    ("layouts-nvlink-and-reduce-dtype", "l4 shape, full", 9_596, 2, False, L4S, 4, "full", None),
    ("layouts-nvlink-and-reduce-dtype", "l4 shape, full+gathered", 13_154, 2, False, L4S, 4, "full+gathered", None),
    ("layouts-nvlink-and-reduce-dtype", "l4 shape, hybrid", 9_691, 2, False, L4S, 4, "full", None),
    ("layouts-nvlink-and-reduce-dtype", "l4 shape, hybrid+bf16", 9_550, 2, False, L4S, 4, "full+bf16", None),
    ("layouts-nvlink-and-reduce-dtype", "h200 shape, full", 47_622, 2, False, H2S, 1, "full", None),
    ("layouts-nvlink-and-reduce-dtype", "h200 shape, full+gathered", 48_471, 2, False, H2S, 1, "full+gathered", None),
    ("layouts-nvlink-and-reduce-dtype", "h200 shape, hybrid+gathered", 47_987, 2, False, H2S, 1, "full+gathered", None),
    ("layouts-nvlink-and-reduce-dtype", "l4 shape, hybrid, fp32 reduction, pattern data", 11_209, 2, False, L4S, 4, "full", None),
    ("layouts-nvlink-and-reduce-dtype", "l4 shape, hybrid, bf16 reduction, pattern data", 11_110, 2, False, L4S, 4, "full+bf16", None),
    ("layouts-sockets", "l4 shape, full, sockets", 1_783, 2, True, L4S, 4, "full", None),
    ("layouts-sockets", "l4 shape, full+gathered, sockets", 4_091, 2, True, L4S, 4, "full+gathered", None),
    ("layouts-sockets", "l4 shape, hybrid, sockets", 3_310, 2, True, L4S, 4, "hybrid", None),
    ("layouts-sockets", "l4 shape, hybrid+bf16, sockets", 5_465, 2, True, L4S, 4, "hybrid+bf16", None),
    ("layouts-sockets", "h200 shape, full, sockets", 15_240, 2, True, H2S, 1, "full", "slower under compute"),
    ("layouts-sockets", "h200 shape, full+gathered, sockets", 19_647, 2, True, H2S, 1, "full+gathered", None),
    ("layouts-sockets", "h200 shape, hybrid+gathered, sockets", 13_057, 2, True, H2S, 1, "hybrid+gathered", None),
    ("variants", "trainer, h200 profile (default)", 49_092, 2, False, H2S, 1, "full", None),
    ("variants", "trainer, micro-batch 4", 45_961, 2, False, (4096, 4, False, 8192), 1, "full", None),
    ("variants", "trainer, micro-batch 12", 49_818, 2, False, (4096, 12, False, 8192), 1, "full", None),
    ("variants", "trainer, keep gathered weights (reshard_after_forward off)", 50_007, 2, False, H2S, 1, "full+gathered", None),
    ("variants", "trainer, loss chunk 4096 tokens", 48_719, 2, False, (4096, 8, False, 4096), 1, "full", None),
    ("variants", "trainer, activation checkpointing", 41_228, 2, False, (4096, 8, True, 8192), 1, "full", None),
]
# Over NVLink a one-node "hybrid" is full sharding (one node); the sockets runs make two one-GPU nodes. Every run
# recorded so far re-gathered the root before each micro-batch (workload.Layout.root_regathered).
LAYOUTS = {layout.name: dataclasses.replace(layout, root_regathered=True) for layout in workload.ALL_LAYOUTS}


def predicted_tokens_per_s(gpus, sockets, shape, accum, layout) -> float:
    seq, micro, recompute, chunk = shape
    work = workload.Workload(seq_len=seq, micro_batch=micro, grad_accum=accum, activation_checkpointing=recompute,
                         loss_chunk_tokens=chunk)
    return timing.estimate(QWEN, work, h200_cluster(gpus, sockets), LAYOUTS[layout]).tokens_per_s_per_gpu


@pytest.mark.parametrize("file,name,measured,gpus,sockets,shape,accum,layout,miss", [
    pytest.param(*c, marks=pytest.mark.xfail(strict=True, reason=MISSES[c[-1]])) if c[-1] else c for c in H200_CASES])
def test_every_h200_measurement_within_15_percent(file, name, measured, gpus, sockets, shape, accum, layout, miss):
    recorded = case(f"2026-11-30-h200x2-{file}.json", name)
    assert recorded["tokens_per_s_per_gpu"] == pytest.approx(measured, abs=1)  # the literal is the file's
    assert predicted_tokens_per_s(gpus, sockets, shape, accum, layout) == pytest.approx(measured, rel=0.15)


def test_over_sockets_the_h200_shapes_step_outlasts_its_collectives_timed_alone():
    """The layouts run timed each collective alone over sockets. Full sharding, one micro-batch: the root's all-gather
    0.0705 s, 28 layers gathered twice at 0.014537 s, reduce-scattered at 0.027363 s, the root's reduce-scatter
    0.142954 s: 1.7937 s; kept gathered, one gather per layer: 1.3867 s. The steps took 2.1501 s and 1.6678 s
    (1.7935 s in the full run): 0.28-0.41 s more, where the compute that cannot overlap them (the first and last
    layer, the head, the optimizer) is under 0.1 s of a 0.65 s step. The collectives ran slower beside compute."""
    data = json.loads((RESULTS / "2026-11-30-h200x2-layouts-sockets.json").read_text())
    alone = {name: c["seconds"] for name, c in data["links"]["layouts-sockets"].items()}
    layers = QWEN.layers
    full = alone["all_gather root"] + 2 * layers * alone["all_gather layer"] + layers * alone["reduce_scatter layer"] + \
        alone["reduce_scatter root"]
    kept = full - layers * alone["all_gather layer"]
    assert (full, kept) == pytest.approx((1.7937, 1.3867), abs=1e-4)
    step = {c["name"]: c["step_time_s"] for c in data["cases"]}
    assert step["h200 shape, full, sockets"] - full > 0.35
    assert step["h200 shape, full+gathered, sockets"] - kept > 0.28
    serial = timing.estimate(QWEN, workload.Workload(4096, 8, 1, False, 8192), h200_cluster(2, True), LAYOUTS["full"])
    assert serial.compute_s < 0.66 and serial.step_s - full < 0.1  # the planner's step: the collectives and < 0.1 s


@pytest.mark.parametrize("measured_step_s", [0.6484, 0.6395])  # sft-checkpoint-h200-{pinned,unpinned}.json baselines
def test_one_gpu_step_of_the_checkpoint_benchmark(measured_step_s):
    predicted = predicted_tokens_per_s(1, False, H2S, 1, "full+gathered")
    assert predicted == pytest.approx(32768 / measured_step_s, rel=0.15)


@pytest.mark.parametrize("file,attention,measured,shape", [  # one GPU, one micro-batch per step, causal attention
    ("sft-masking-h200.json", "sdpa", 51_182, H2S), ("sft-masking-h200.json", "flex", 48_669, H2S),
    ("sft-masking-l4shape.json", "sdpa", 10_456, L4S), ("sft-masking-l4shape.json", "flex", 10_496, L4S)])
def test_one_gpu_causal_steps_of_the_masking_benchmark(file, attention, measured, shape):
    rows = json.loads((RESULTS / file).read_text())["rows"]
    row = next(r for r in rows if r["attention"] == attention and r["data"] == "causal" and r["seq_len"] == shape[0])
    assert row["tokens_per_s_per_gpu"] == pytest.approx(measured, abs=1)
    assert predicted_tokens_per_s(1, False, shape, 1, "full") == pytest.approx(measured, rel=0.15)


# The runs of 2026-12-01 (one H200, and the two-GPU runs): every case of the trainer with no lever, on random tokens
# with torch.compile (machine B's "before" is the trainer before the host syncs were removed).
HOST_BOUND = "host-bound on an H200 at 1 x 2048: the same case differs by up to 59% between machines (the host's speed)"
LATER_MISSES = {("2026-12-01-h200-one-gpu-compute-four-machines.json", "A-after", "one GPU, grad_accum 4"),
                ("2026-12-01-h200-one-gpu-compute-four-machines.json", "B-before", "one GPU, grad_accum 4"),
                ("2026-12-01-h200-one-gpu-compute-four-machines.json", "B-after", "one GPU, grad_accum 1"),
                ("2026-12-01-h200-one-gpu-compute-four-machines.json", "C-after", "one GPU, grad_accum 4"),
                ("2026-12-01-h200-one-gpu-compute-four-machines.json", "C-after", "one GPU, grad_accum 16"),
                ("2026-12-01-h200-syncs-in-rounds.json", "C-after", "trainer, l4 profile"),
                ("2026-12-01-h200x2-accumulation-nvlink-and-sockets.json", "B-after", "one GPU, grad_accum 1"),
                ("2026-12-01-h200x2-accumulation-nvlink-and-sockets.json", "B-after", "one GPU, grad_accum 4")}


# Groups that ran world size 2 as two one-GPU nodes: the emulation tests below check them as such.
EMULATED_NODES = {"accumulation-nvlink", "accumulation-sockets"}


def later_runs() -> list[tuple]:
    found = []
    for path in sorted(RESULTS.glob("2026-12-01-h200*.json")):
        data = json.loads(path.read_text())
        runs = data.get("runs") or [{"machine": "", "code": "after", "cases": data.get("cases", [])}]
        for run in runs:
            for c in run["cases"]:
                st = c.get("settings", {})
                if (c.get("recipe") == "trainer" and not c.get("levers") and c.get("tokens_per_s_per_gpu")
                        and st.get("data") == "random" and st.get("compile") and c.get("group") not in EMULATED_NODES):
                    found.append((path.name, f"{run['machine']}-{run['code'].split()[0].rstrip(',')}".strip("-"), c["name"], c))
    return found


LATER_RUNS = later_runs()


def test_every_later_run_is_checked():
    """The selection finds every case the files hold of the trainer as it is (counted by hand from each file), so a
    renamed field cannot make the check above pass on nothing."""
    counts = {}
    for name, *_ in LATER_RUNS:
        counts[name] = counts.get(name, 0) + 1
    assert counts == {"2026-12-01-h200-guard-in-rounds.json": 3, "2026-12-01-h200-host-syncs.json": 3,
                      "2026-12-01-h200-mfu-guard-and-accumulation.json": 1, "2026-12-01-h200-mfu-repeat-with-peer.json": 2,
                      "2026-12-01-h200-one-gpu-compute-four-machines.json": 24, "2026-12-01-h200-one-gpu-compute.json": 6,
                      "2026-12-01-h200-syncs-in-rounds.json": 8, "2026-12-01-h200x2-mfu-levers.json": 5,
                      "2026-12-01-h200x2-accumulation-nvlink-and-sockets.json": 2,
                      "2026-12-01-h200x2-mfu-default-and-peer-in-rounds.json": 4,
                      "2026-12-01-h200-communication-levers-check.json": 1}


@pytest.mark.parametrize("file,machine,name,recorded", [
    pytest.param(*run, marks=pytest.mark.xfail(strict=True, reason=HOST_BOUND)) if run[:3] in LATER_MISSES else run
    for run in LATER_RUNS], ids=[f"{f[11:-5]}-{m}-{n}" for f, m, n, _ in LATER_RUNS])
def test_every_later_h200_measurement_within_15_percent(file, machine, name, recorded):
    st = recorded["settings"]
    work = workload.Workload(seq_len=st["seq_len"], micro_batch=st["micro_batch"], grad_accum=st["grad_accum"],
                         activation_checkpointing=st["activation_checkpointing"], loss_chunk_tokens=st["loss_chunk_tokens"])
    layout = workload.Layout("full", not st["reshard_after_forward"], st["reduce_dtype"], root_regathered=True)
    predicted = timing.estimate(QWEN, work, h200_cluster(recorded.get("world_size", 1), False), layout)
    assert predicted.tokens_per_s_per_gpu == pytest.approx(recorded["tokens_per_s_per_gpu"], rel=0.15)


def test_p5_is_predicted_on_the_measured_basis_not_the_datasheet():
    """An H100 has the H200's 989 TFLOP/s datasheet peak: at the h200 profile's shape it must predict what
    the H200 measured (50,397 tok/s/GPU), not 989/788 times more (the 65,006 of the mixed basis)."""
    p5 = workload.cluster_of("p5.48xlarge", 2)
    e = timing.estimate(QWEN, H200_SHAPE, p5, workload.Layout("hybrid"))
    assert e.tokens_per_s_per_gpu == pytest.approx(50_397, rel=0.15) and e.tokens_per_s_per_gpu < 55_000
    assert calibration.CALIBRATION.basis(GPUS["H100"], H200_SHAPE, QWEN).startswith(
        "compute basis: H100: matmul kernels at 788 TFLOP/s = 989 datasheet x 0.797, the H200's measured matmul "
        "fraction, memory-bound kernels at 2,651 GB/s = 3350 datasheet x 0.791, the H200's measured copy fraction")


def test_auto_on_p5_never_picks_what_does_not_fit_and_keeps_the_batch(capsys):
    h200_profile = workload.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False,
                                 loss_chunk_tokens=8192)
    p5 = workload.cluster_of("p5.48xlarge", 2)
    assert not any(e.fits for e in search.rank_layouts(QWEN, h200_profile, p5))  # 85-90 GiB of 80 GB
    assert search.choose(QWEN, h200_profile, p5, keep_gathered=True) is None
    best = search.choose(QWEN, h200_profile, p5, keep_gathered=True, shapes=True)
    assert best.fits and best.work.micro_batch * best.work.grad_accum == 8  # 8 x 4096 tokens per GPU per step
    assert plan.main(["--instance-type", "p5.48xlarge", "--profile", "h200", "--micro-batch", "8",
                      "--activation-checkpointing", "none", "--reduce-dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert ("auto: nothing fits: --micro-batch: 8 x 4096 tokens per micro-batch without recomputation needs 88.0 "
            "GiB/GPU") in out
    assert "micro-batch 4 x 2 accumulation, no recomputation fits at 56.6 GiB" in out
    # Left to auto, the micro-batch is that one: the fastest of the divisors of 8 that fits.
    assert plan.main(["--instance-type", "p5.48xlarge", "--profile", "h200", "--activation-checkpointing", "none",
                      "--reduce-dtype", "fp32"]) == 0
    assert "\nauto: full+gathered, micro-batch 4 x 2 accumulation, no recomputation: fastest that fits" in (
        capsys.readouterr().out)


def test_nothing_fits_at_any_shape_names_the_gpus():
    fourteen = workload.MODELS["qwen2.5-14b"]
    problem = search.fit_error(fourteen, L4_SHAPE, G6, workload.SHARDINGS, False, "fp32")
    # 14.8B parameters x 16 bytes over 4 GPUs of a node alone is 59 GB: no shape fits a 24 GB L4.
    assert problem.startswith("--instance-type: qwen2.5-14b fits in no layout, micro-batch or recomputation on "
                              "2 x g6.12xlarge (24 GB per GPU)")


def test_a_faster_shape_at_the_same_batch_is_offered():
    best = search.choose(QWEN, L4_SHAPE, G6, shapes=True)
    assert best.fits and best.work.micro_batch * best.work.grad_accum == 4
    assert best.step_s <= search.choose(QWEN, L4_SHAPE, G6).step_s


def test_batch_line_names_the_smallest_batch_whose_links_cost_at_most_10_percent():
    chosen = search.choose(QWEN, L4_SHAPE, G6, reduce_dtype="bf16")
    line = search.batch_line(QWEN, L4_SHAPE, G6, chosen)
    tokens = int(line.split("from batch_tokens ")[1].split(" ")[0].replace(",", ""))
    accum = tokens // (8 * 2048)
    share = lambda m: (lambda e: e.exposed_s / e.step_s)(  # noqa: E731
        timing.estimate(QWEN, workload.Workload(2048, 1, m, True, 2048), G6, chosen.layout))
    assert share(accum) <= 0.10 < share(accum - 1)  # the consumer's rule: smallest such batch
    assert "tok/s/GPU, the same 13,107,200 tokens in" in line and "~$" in line  # 200 steps x 65,536 tokens


# ------------------------------------------------------------------ the sockets emulation, accumulation 4 and 16

# 2 x H200 as two one-GPU nodes over NCCL sockets (docs/benchmarks.md, "Accumulation on the emulated link"): l4
# shape (1 x 2048, recomputation, compile), hybrid, fp32 accumulation; link busbw 3.08 GB/s (all-gather, a layer).
# Each node's compute is its one-GPU step (Calibration.one_gpu): a shard group of one GPU gathers nothing.
ACCUMULATION_RUNS = [  # (grad_accum, bytes on the wire, tok/s/GPU, s/step)
    (4, "fp32", 3_899, 2.101), (4, "bf16", 5_605, 1.461), (16, "fp32", 8_802, 3.723), (16, "bf16", 11_724, 2.795)]
LINK_MISS = ("link term: the step implies the fp32 all-reduce ran at ~3.8 GB/s, above the 3.08 GB/s measured for "
             "the layer-sized collectives in the same run (+17%); bf16 and 16 micro-batches are within 6%")


def accumulation_estimate(accum: int, wire: str) -> timing.Estimate:
    cluster = workload.Cluster(gpu=H200, nodes=2, gpus_per_node=1, inter_node_gbps=3.08 / calibration.CALIBRATION.link_efficiency)
    return timing.estimate(QWEN, workload.Workload(2048, 1, accum, True, 2048), cluster, workload.Layout("hybrid", False, wire, root_regathered=True))


@pytest.mark.parametrize("accum,wire,tokens_per_s,step_s", [
    pytest.param(*run, marks=pytest.mark.xfail(strict=True, reason=LINK_MISS)) if run[:2] == (4, "fp32") else run
    for run in ACCUMULATION_RUNS])
def test_accumulation_on_the_emulated_link_within_15_percent(accum, wire, tokens_per_s, step_s):
    assert 2048 * accum / step_s == pytest.approx(tokens_per_s, rel=0.001)  # the two published figures agree
    assert accumulation_estimate(accum, wire).step_s == pytest.approx(step_s, rel=0.15)


def test_the_link_term_matches_what_bf16_saves_at_accumulation_16():
    # fp32 minus bf16 on the wire: 3.09 GB fewer all-reduce bytes; measured 3.723 - 2.795 = 0.928 s.
    saved = accumulation_estimate(16, "fp32").step_s - accumulation_estimate(16, "bf16").step_s
    assert saved == pytest.approx(3.723 - 2.795, rel=0.15)


# The same on two machines of 2026-12-01, with the trainer as it is, each sockets case beside its NVLink twin (the
# accumulation suite's two groups): hybrid and full with the weights kept gathered. Link: all-gather busbw at one
# layer's size over sockets, 2.898 GB/s (machine B; A's was lost). B ran the two full+gathered cases at 16.
EMULATION_FILE = "2026-12-01-h200x2-accumulation-nvlink-and-sockets.json"
EMULATION_GBPS = 2.898
EMULATION_RUNS = [  # (layout, wire, grad_accum, sockets s/step, NVLink twin s/step), copied from the file
    ("hybrid", "fp32", 4, 2.5695, 0.7085), ("hybrid", "bf16", 4, 1.6228, 0.6451),
    ("hybrid", "fp32", 16, 4.7622, 2.6670), ("hybrid", "bf16", 16, 3.6719, 2.5351),
    ("full+gathered", "fp32", 16, 3.2238, 1.9257), ("full+gathered", "bf16", 16, 2.9368, 1.8692)]
SLOW_HOST = ("machine A's host: its NVLink twin took 2.535 s, 25% over the one-GPU term's 2.024 s for 16 micro-batches "
             "(-18%); with the twin's compute the case is within 5%")


def emulation_cases() -> list[dict]:
    return [c for run in json.loads((RESULTS / EMULATION_FILE).read_text())["runs"] for c in run["cases"]]


def emulation_name(layout: str, wire: str, accum: int, link: str) -> str:
    return f"{layout}, {wire} on the wire, grad_accum {accum}, {link}"


@pytest.mark.parametrize("layout,wire,accum,sockets_s,nvlink_s", [
    pytest.param(*run, marks=pytest.mark.xfail(strict=True, reason=SLOW_HOST)) if run[:3] == ("hybrid", "bf16", 16) else run
    for run in EMULATION_RUNS])
def test_accumulation_on_the_emulated_link_within_15_percent_two_machines_later(layout, wire, accum, sockets_s, nvlink_s):
    recorded = {c["name"]: c["step_time_s"] for c in emulation_cases()}
    assert recorded[emulation_name(layout, wire, accum, "sockets")] == pytest.approx(sockets_s, abs=1e-4)
    assert recorded[emulation_name(layout, wire, accum, "NVLink")] == pytest.approx(nvlink_s, abs=1e-4)
    cluster = workload.Cluster(gpu=H200, nodes=2, gpus_per_node=1, inter_node_gbps=EMULATION_GBPS / calibration.CALIBRATION.link_efficiency)
    estimate = timing.estimate(QWEN, workload.Workload(2048, 1, accum, True, 2048), cluster,
                             dataclasses.replace(LAYOUTS[layout], reduce_dtype=wire))
    assert estimate.step_s == pytest.approx(sockets_s, rel=0.15)


def test_with_each_twins_compute_every_emulated_case_is_within_10_percent():
    """The link and overlap terms alone: the benchmark's own comparison, each case's compute from its NVLink twin
    (what the host's speed cannot move), on the file's rows and link measurement."""
    from benchmarks import report
    data = json.loads((RESULTS / EMULATION_FILE).read_text())
    links = {"accumulation-sockets": data["runs"][1]["links"]["accumulation-sockets"]}
    rows = report.emulation_rows(emulation_cases(), links, "qwen2.5-1.5b")
    assert sorted(r["name"] for r in rows) == sorted(emulation_name(*run[:3], "sockets") for run in EMULATION_RUNS)
    assert {r["name"]: r["measured_step_s"] for r in rows} == pytest.approx(
        {emulation_name(*run[:3], "sockets"): run[3] for run in EMULATION_RUNS}, abs=1e-4)
    assert max(abs(r["error_run_compute"]) for r in rows) <= 0.10


def test_kept_gathered_only_the_first_micro_batch_waits_on_a_gather():
    """2 H200s over NVLink, 1 x 2048 with recomputation: a 2-GPU group's micro-batch is (0.7552 - 0.0667) / 4 =
    0.17213 s, one GPU's 0.1223 s. Kept gathered, the first micro-batch waits on one of its two gathers per layer:
    0.0667 + 16 x 0.1223 + (0.17213 - 0.1223) / 2 = 2.0484 s for 16 (measured 1.926 and 1.869 s, fp32 and bf16 on
    the wire, machine A), 0.0667 + 4 x 0.1223 + 0.0249 = 0.5808 s for 4."""
    node = workload.Cluster(gpu=H200, nodes=1, gpus_per_node=2, inter_node_gbps=0.0)
    for accum, seconds in ((16, 2.0484), (4, 0.5808)):
        work = workload.Workload(2048, 1, accum, True, 2048)
        assert timing.estimate(QWEN, work, node, workload.Layout("full", keep_gathered=True)).compute_s == pytest.approx(seconds, rel=1e-3)


def test_another_gpus_host_bound_step_keeps_the_layouts_gathered_saving():
    """2 H100s at the same host-bound shape: their kernels (about 1.19 s at 16 micro-batches, 0.31 s at 4) take less
    than the host's launches, which are the H200's measured step of the same model and layout: kept gathered, the
    2.0484 s and 0.5808 s of the worked example above, not the 2.82 s and 0.755 s of a step that gathers twice per
    micro-batch."""
    from training.gpus import GPUS

    node = workload.Cluster(gpu=GPUS["H100"], nodes=1, gpus_per_node=2, inter_node_gbps=0.0)
    for accum, seconds in ((16, 2.0484), (4, 0.5808)):
        work = workload.Workload(2048, 1, accum, True, 2048)
        assert timing.estimate(QWEN, work, node, workload.Layout("full", keep_gathered=True)).compute_s == pytest.approx(seconds, rel=1e-3)


def test_the_basis_line_gives_the_host_floor_of_both_kinds_of_layout():
    """The H100's line at 16 micro-batches: 0.0667 + 16 x 0.17213 = 2.82 s when the layers are gathered twice per
    micro-batch, 2.05 s kept gathered (the worked example above)."""
    from training.gpus import GPUS

    line = calibration.CALIBRATION.basis(GPUS["H100"], workload.Workload(2048, 1, 16, True, 2048), QWEN, 2)
    assert "take less than the host's launches, 2.82 s (2.05 s with the weights kept gathered): " in line


def test_plan_cli_offers_a_faster_shape_at_the_same_batch_and_lora_when_nothing_fits(capsys):
    # 2 x g6.12xlarge, l4 profile: 65,536 tokens per step, its 1 x 2048 x 4 with full recomputation fixed.
    assert plan.main(["--micro-batch", "1", "--activation-checkpointing", "full", "--reduce-dtype", "fp32"]) == 0
    assert ("\nfaster at the same 65,536 tokens per step: micro-batch 4 x 1 accumulation, full recomputation"
            in capsys.readouterr().out)
    # 14.8B parameters: 16 bytes each over a node's 4 GPUs is 59 GB per 24 GB GPU; LoRA's adapters are small.
    assert plan.main(["--model", "qwen2.5-14b"]) == 0
    out = capsys.readouterr().out
    assert "auto: nothing fits: --instance-type: qwen2.5-14b fits in no layout" in out
    assert "\nLoRA fits (--lora-rank 16: 2 x g6.12xlarge, " in out


def test_usable_memory_is_the_datasheet_gigabytes_less_the_runtimes_share():
    """Datasheets give GPU memory in GB (10^9 bytes): an L4 has 24 GB = 24,000,000,000 bytes; less 1.5 GiB
    (1,610,612,736 bytes) for the CUDA context, cuBLAS and NCCL, the allocator has 22,389,387,264 bytes."""
    from training.gpus import GPUS
    from planning.memory import usable_bytes

    assert usable_bytes(GPUS["L4"]) == 22_389_387_264
    assert usable_bytes(GPUS["H100"]) == 78_389_387_264  # 80,000,000,000 - 1,610,612,736


# ------------------------------------------------------------------ two rooflines: the H200's kernels on other GPUs

KERNEL_PROFILE = json.loads((RESULTS / "2026-11-30-h200-kernel-profile.json").read_text())


def _profiled(name: str) -> dict:
    return next(s for s in KERNEL_PROFILE["shapes"] if s["name"].startswith(name))


@pytest.mark.parametrize("name,key", [("l4 profile", (True, 2048)), ("l4 shape without", (False, 2048)),
                                      ("h200 profile", (False, 32768)), ("h200 shape with", (True, 32768))])
def test_the_kernel_calibration_is_the_profile_run(name, key):
    """Model TFLOP/s = tokens x FLOPs per token / matmul-kernel seconds; memory = (memory-kernel seconds less the
    optimizer step's share) / tokens."""
    shape = _profiled(name)
    tokens, seconds = shape["tokens_per_step"], shape["split"]["kernel_s"]
    matmul_tflops, memory_us = calibration.CALIBRATION.kernels[key]
    assert matmul_tflops == pytest.approx(tokens * shape["flops_per_token"] / seconds["matmul"] / 1e12, rel=0.002)
    assert memory_us == pytest.approx((seconds["memory"] - _optimizer_step_seconds()) / tokens * 1e6, rel=0.002)
    assert calibration.CALIBRATION.memory_bandwidth_gbps["H200"] == pytest.approx(KERNEL_PROFILE["copy_gbps"], rel=0.001)


def _optimizer_step_seconds() -> float:
    """The optimizer step's memory-bound seconds on one H200: the l4 shape at 1 and 16 micro-batches differ by 15
    micro-batches' work; what the one-micro-batch step has beyond one micro-batch is the step's own."""
    runs = {s["settings"]["grad_accum"]: s["split"]["kernel_s"]["memory"] for s in ACCUMULATION_PROFILE["shapes"]}
    return runs[1] - (runs[16] - runs[1]) / 15


ACCUMULATION_PROFILE = json.loads((RESULTS / "2026-12-01-h200-kernel-profile-accumulation.json").read_text())


def test_the_optimizer_steps_share_is_per_million_parameters_of_the_profiled_model():
    """42.71 ms at 1 micro-batch, 395.21 ms at 16: 23.50 ms each, 19.21 ms a step, over 1,543.7M parameters."""
    assert _optimizer_step_seconds() == pytest.approx(0.01921, abs=2e-5)
    assert calibration.CALIBRATION.step_memory_us_per_mparam == pytest.approx(
        _optimizer_step_seconds() * 1e6 / 1543.714304, rel=0.001)  # Qwen2.5-1.5B: 1,543,714,304 parameters


def test_an_l4_step_is_the_h200_kernels_scaled_by_matmul_peak_and_bandwidth():
    """The l4 profile's step on the H200: 0.1502 s of matmul kernels; memory-bound 12.305 us x 8,192 tokens plus the
    optimizer over a node's quarter of the parameters, 12.444 us x 1,543.7M / 4 = 4,803 us: 0.10561 s. An L4 at
    121 x 788.3/989 = 96.45 TFLOP/s and 300 x 3,799/4,800 = 237.4 GB/s: 0.1502 x 788.3/96.45 = 1.228 s and
    0.10561 x 3,799/237.4 = 1.690 s, 2.918 s of compute (hybrid: the optimizer shard is a node's, 4 GPUs)."""
    e = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("hybrid"))
    assert e.compute_s == pytest.approx(1.228 + 1.690, rel=0.005)
    full = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("full"))  # 8 GPUs share the optimizer: 2,401 us less, x 16
    assert e.compute_s - full.compute_s == pytest.approx(0.002401 * 16.0, rel=0.01)


def test_a_micro_batch_between_the_profiled_sizes_spreads_its_fixed_cost_over_its_tokens():
    """Memory-bound us per token a + b / tokens through 12.305 (2,048) and 3.254 (32,768) with recomputation:
    b = 9.051 / (1/2,048 - 1/32,768) = 19,772, a = 3.254 - 19,772/32,768 = 2.651; at 4 x 2,048: 2.651 + 2.414 = 5.064."""
    four = workload.Workload(seq_len=2048, micro_batch=4, grad_accum=1, activation_checkpointing=True)
    assert calibration.CALIBRATION.kernel_profile(four, QWEN)[1] == pytest.approx(5.064, rel=0.001)
    assert calibration.CALIBRATION.kernel_profile(L4_SHAPE, QWEN) == pytest.approx((563.0, 12.305))


def test_the_matmul_rate_between_and_beyond_the_profiled_sizes():
    """Seconds per TFLOP a + b / tokens through 1/563 (2,048) and 1/594 (32,768) with recomputation: b = 0.2025,
    a = 0.0016773; at 8,192 tokens 1 / (a + b/8,192) = 587.5 TFLOP/s; at 512, beyond the profile, 482.4 (and the
    memory-bound cost 2.651 + 19,772/512 = 41.27 us per token)."""
    four = workload.Workload(seq_len=2048, micro_batch=4, grad_accum=1, activation_checkpointing=True)
    assert calibration.CALIBRATION.kernel_profile(four, QWEN)[0] == pytest.approx(587.5, rel=0.001)
    short = workload.Workload(seq_len=512, micro_batch=1, grad_accum=1, activation_checkpointing=True)
    assert calibration.CALIBRATION.kernel_profile(short, QWEN) == pytest.approx((482.4, 41.27), rel=0.001)


def test_a_larger_model_scales_memory_work_per_token_by_its_activations_and_per_micro_batch_by_its_weights():
    """Qwen2.5-7B at 1 x 2,048: 2.6506 us x (28 x 3,584) / (28 x 1,536) = 6.185 us of activations' work per token,
    plus 19,772 us x 7,615,616,512 / 1,543,714,304 parameters / 2,048 tokens = 47.628 us of weights' work: 53.81 us."""
    seven = workload.MODELS["qwen2.5-7b"]
    assert calibration.CALIBRATION.kernel_profile(L4_SHAPE, seven)[1] == pytest.approx(6.185 + 47.628, rel=0.001)


def test_a_profile_that_is_not_a_per_token_plus_per_micro_batch_cost_is_refused():
    """Costs that grow with the micro-batch's size would give a negative cost per micro-batch."""
    odd = dataclasses.replace(calibration.CALIBRATION, kernels={(True, 2048): (563.0, 3.0), (True, 32768): (594.0, 14.0)})
    with pytest.raises(ValueError, match=r"^kernel profile \{2048: 3\.0, 32768: 14\.0\}: not a per-token plus "
                       r"per-micro-batch cost"):
        odd.kernel_profile(L4_SHAPE, QWEN)


def test_a_gpu_whose_kernels_outrun_the_h200s_step_is_bounded_by_the_h200s_measured_time():
    """The host's launches take the H200's whole measured step at 1 x 2,048 (56% of it idle in the profile): a GPU
    ten times faster in both ceilings does not predict a step ten times shorter."""
    fast = dataclasses.replace(GPUS["H200"], name="faster", bf16_tflops=9890.0, memory_bandwidth_gbps=48000)
    measured = 8192 * 10_319_250_432 / (788.3e12 * 0.142)  # 0.7552 s
    assert calibration.CALIBRATION.compute_seconds(fast, L4_SHAPE, QWEN) == pytest.approx(measured, rel=1e-6)
    assert calibration.CALIBRATION.basis(fast, L4_SHAPE, QWEN).startswith("compute basis: faster's kernels (")


def test_the_host_bound_grows_with_the_layers_not_with_the_flops():
    """Qwen2.5-14B has 48 layers to 1.5B's 28 and 9.2x its FLOPs per token: on the fast GPU above its host-bound
    step at 1 x 2,048 x 4 is 0.7552 s x 48 / 28 = 1.2946 s, not 9.2 x 0.7552 = 6.93 s."""
    fast = dataclasses.replace(GPUS["H200"], name="faster", bf16_tflops=98900.0, memory_bandwidth_gbps=480000)
    fourteen = workload.MODELS["qwen2.5-14b"]
    assert calibration.CALIBRATION.compute_seconds(fast, L4_SHAPE, fourteen) == pytest.approx(0.7552 * 48 / 28, rel=1e-3)


def test_a_measured_ceiling_replaces_the_datasheet_estimate():
    """With an L4 measured at 60 TFLOP/s and 240 GB/s: 0.1502 x 788.3/60 + 0.10561 x 3,799/240 = 1.973 + 1.672 s
    (test_an_l4_step_is_...: 0.10561 s of memory-bound work on the H200 with a node's optimizer shard)."""
    measured = dataclasses.replace(calibration.CALIBRATION, matmul_peak_tflops={"H200": 788.3, "L4": 60.0},
                                   memory_bandwidth_gbps={"H200": 3799.0, "L4": 240.0})
    e = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("hybrid"), measured)
    assert e.compute_s == pytest.approx(1.973 + 1.672, rel=0.005)
    assert "matmul kernels at 60 TFLOP/s measured, memory-bound kernels at 240 GB/s measured" in measured.basis(
        GPUS["L4"], L4_SHAPE, QWEN)


# ------------------------------------------------------------------ mutation testing's survivors (docs/testing.md)

ONE_G6 = ("g6.12xlarge", 1)


def test_a_clusters_price_is_one_nodes_price_times_the_nodes():
    """g6.12xlarge at $4.6016 an hour: 3 nodes cost $13.8048 an hour (built here, not at import, so mutmut sees it)."""
    assert workload.cluster_of("g6.12xlarge", 3).usd_per_hour == pytest.approx(13.8048)


def test_lora_moves_only_the_adapters_gradients_between_nodes():
    """Rank 16 on each of Qwen2.5-1.5B's 28 layers, 41,216 linear in+out features: 16 x 41,216 x 28 = 18,464,768
    trained parameters; hybrid's fp32 all-reduce over 2 nodes: 2 x 4 B x 18,464,768 x 1/2 = 73,859,072 bytes."""
    lora = dataclasses.replace(L4_SHAPE, lora_rank=16)
    assert timing.estimate(QWEN, lora, G6, workload.Layout("hybrid")).inter_bytes == pytest.approx(73_859_072)


def test_the_intra_node_link_runs_at_the_calibrated_share_of_its_bandwidth():
    """One g6.12xlarge node, full over its 4 L4s, 4 micro-batches: bf16 layers twice per micro-batch
    (2 x 1,310,339,072 x 2 x 4 = 20,965,425,152 B), the root once a step (2 x 233,375,232 = 466,750,464 B) and the
    fp32 reduce-scatter (4 x 1,543,714,304 = 6,174,857,216 B), x 3/4 over 4 ranks = 20,705,274,624 B over PCIe's
    32 GB/s at 60% (19.2 GB/s): 1.0784 s."""
    e = timing.estimate(QWEN, L4_SHAPE, workload.cluster_of(*ONE_G6), workload.Layout("full"))
    assert e.intra_bytes == pytest.approx(20_705_274_624)
    assert e.intra_s == pytest.approx(1.0784, rel=1e-4)


def test_one_gpu_moves_nothing_and_waits_for_no_link():
    one_gpu = workload.Cluster(gpu=H200, nodes=1, gpus_per_node=1, inter_node_gbps=0.0)
    e = timing.estimate(QWEN, L4_SHAPE, one_gpu, workload.Layout("full"))
    assert (e.intra_bytes, e.intra_s, e.inter_s) == (0, 0, 0)
    assert e.exposed_s == pytest.approx(0, abs=1e-9)  # the step's phases add back to the compute


def test_without_recomputation_the_reductions_hide_behind_two_thirds_of_the_last_backward():
    """Backward is 2 of a layer's 3 passes without recomputation. Hybrid on 2 g6 nodes, one 1 x 2048 micro-batch,
    0.7230 s of compute, 0.07684 s of it the optimizer (above): the micro-batch's 0.64616 s less the head's 13.569%
    (its 3 passes against the layers' 3: 0.08768 s) leaves the layers 0.55848 s, their backward 0.37232 s, the last
    layer's 0.01330 s. The weight gathers (2 B x (2 x 1,310,339,072 + 233,375,232) x 3/4 at 19.2 GB/s = 0.2230 s)
    hide in the 0.2738 s before it. The all-reduce: the layers' 1.74712 s after the last layer's backward, the
    root's 0.31117 s after all compute and its reduce-scatter in the node (0.03646 s, above); the root's first gather
    2 x 233,375,232 x 3/4 = 350,062,848 B at 19.2 GB/s = 0.0182 s. Exposed: 0.0182 + 0.01330 + 1.74712 - 0.37232 +
    0.03646 + 0.31117 = 1.75393 s."""
    e = timing.estimate(QWEN, workload.Workload(2048, 1, 1, False, 2048), G6, workload.Layout("hybrid"))
    assert e.compute_s == pytest.approx(0.7230, rel=1e-4)
    assert e.exposed_s == pytest.approx(1.75393, rel=1e-4)


def test_flops_per_step_are_the_model_flops_of_every_token_of_the_step():
    """6 x 1,543,714,304 + 12 x 28 x 12 x 128 x 2048 = 10,319,250,432 FLOPs per token, x 4 x 2048 tokens."""
    assert timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("hybrid")).flops_per_step == 84_535_299_538_944


def test_mfu_is_what_the_trainers_log_reports_for_the_predicted_speed():
    from training.metrics import mfu

    e = timing.estimate(QWEN, L4_SHAPE, G6, workload.Layout("hybrid"))
    assert e.mfu == pytest.approx(mfu(e.tokens_per_s_per_gpu, 10_319_250_432, 121.0), rel=1e-9)


@pytest.mark.parametrize("lora_rank,expected", [(0, 1_134_208), (4, 450_240)])
def test_memory_of_the_tiny_model_term_by_term(lora_rank, expected):
    """tiny: 107,072 parameters (root 32,832, 2 layers of 37,120), hidden 64, vocab 512; 1 x 8 tokens, no
    recomputation, one micro-batch, resharded, over 2 GPUs. Full: weights and moments 12 x 107,072 / 2 = 642,432,
    gradients 4 x 107,072 / 2 = 214,144, gathered root and two layers 2 x (32,832 + 2 x 37,120) = 214,144,
    activations 46 x 8 x 64 x 2 = 47,104, loss chunk 4 x 8 x 512 = 16,384: 1,134,208. LoRA rank 4: 4 x 1,024 x 2 =
    8,192 adapters, state (12 x 8,192 + 2 x 107,072 frozen bf16) / 2 = 156,224, gradients 4 x 8,192 / 2 = 16,384,
    the rest as before: 450,240."""
    work = workload.Workload(seq_len=8, micro_batch=1, grad_accum=1, activation_checkpointing=False, loss_chunk_tokens=8,
                         lora_rank=lora_rank)
    assert memory.memory_bytes(workload.MODELS["tiny"], work, workload.Layout("full"), 2, calibration.CALIBRATION) == expected


@pytest.mark.parametrize("work,expected", [
    # Recomputation's points joined by no recomputation's at their ratio where both were measured (32,768 tokens):
    # 4 x 4096 with recomputation: 0.663 x 0.595 / 0.727 = 0.54262; 1 x 2048 without: 0.142 x 0.727 / 0.595 = 0.17350.
    (workload.Workload(4096, 4, 1, True), 0.54262), (workload.Workload(2048, 1, 1, False), 0.17350),
    # Between 32,768 (0.727) and 49,152 (0.719) tokens, linear in log2: 40,960 is log2(1.25) / log2(1.5) = 0.55034 of
    # the way, 0.727 - 0.55034 x 0.008 = 0.72260. Beyond the largest size, flat: 0.719.
    (workload.Workload(4096, 10, 1, False), 0.72260), (workload.Workload(4096, 16, 1, False), 0.719),
])
def test_reference_efficiency_between_and_beyond_the_measured_sizes(work, expected):
    assert calibration.CALIBRATION.reference_efficiency(work) == pytest.approx(expected, abs=2e-5)


@pytest.mark.parametrize("work,shape", [
    (H200_SHAPE, "72.7% efficiency at 32,768 tokens per micro-batch;"),
    (L4_SHAPE, "14.2% efficiency at 2,048 tokens per micro-batch with recomputation;")])
def test_the_reference_gpus_basis_names_its_efficiency_and_shape(work, shape):
    assert calibration.CALIBRATION.basis(H200, work, QWEN) == (
        f"compute basis: H200 at its measured bf16 matmul peak 788 TFLOP/s (989 datasheet) x {shape} "
        "MFU is against the datasheet peak")


def test_same_batch_shapes_are_every_divisor_of_the_sequences_per_gpu():
    shapes = search.same_batch_shapes(workload.Workload(2048, 2, 2, True))
    assert [(w.micro_batch, w.grad_accum, w.activation_checkpointing) for w in shapes] == [
        (m, 4 // m, r) for m in (1, 2, 4) for r in ("none", "selective", "full")]
    # What the options fix stays: the micro-batch alone, or the recomputation alone.
    assert [(w.micro_batch, w.activation_checkpointing) for w in search.same_batch_shapes(
        workload.Workload(2048, 2, 2, "none"), ("micro_batch",))] == [(1, "none"), (2, "none"), (4, "none")]
    assert [(w.micro_batch, w.activation_checkpointing) for w in search.same_batch_shapes(
        workload.Workload(2048, 2, 2, "none"), ("activation_checkpointing",))] == [(2, "none"), (2, "selective"), (2, "full")]


def test_one_node_chooses_full_sharding_by_its_name():
    assert search.choose(QWEN, L4_SHAPE, workload.cluster_of(*ONE_G6)).layout == workload.Layout("full")


def test_choose_keeps_the_users_reduction_dtype():
    assert search.choose(QWEN, L4_SHAPE, G6, reduce_dtype="bf16").layout == workload.Layout("hybrid", False, "bf16")


MEASURED_L4 = dataclasses.replace(calibration.CALIBRATION, matmul_peak_tflops={"H200": 788.3, "L4": 60.0},
                                  memory_bandwidth_gbps={"H200": 3799.0, "L4": 240.0})


def test_ranking_choosing_and_the_batch_search_use_the_calibration_given():
    """test_a_measured_ceiling_replaces_the_datasheet_estimate's L4: 1.973 s of matmul and 0.100803 s of the H200's
    memory-bound work per 4 micro-batches, plus the optimizer's 12.444 us x 1,543.7M over the shard group once a step
    (hybrid: 4 GPUs, 4,803 us; full: 8, 2,401 us), all memory x 3,799/240."""
    def compute(grad_accum: int, shard: int) -> float:
        return 1.973 * grad_accum / 4 + (0.100803 * grad_accum / 4 + 0.019210 / shard) * 3799 / 240

    for e in search.rank_layouts(QWEN, L4_SHAPE, G6, MEASURED_L4):
        assert e.compute_s == pytest.approx(compute(4, 4 if e.layout.sharding == "hybrid" else 8), rel=0.005)
    chosen = search.choose(QWEN, L4_SHAPE, G6, calibration=MEASURED_L4)
    assert chosen.compute_s == pytest.approx(compute(4, 4 if chosen.layout.sharding == "hybrid" else 8), rel=0.005)
    found = search.link_bound_batch(QWEN, L4_SHAPE, G6, workload.Layout("hybrid", False, "bf16"), MEASURED_L4)
    assert found.compute_s == pytest.approx(compute(found.work.grad_accum, 4), rel=0.005)


def test_fit_error_judges_memory_with_the_calibration_given():
    """An allocator that reserved 10x what it allocates: nothing fits a 24 GB L4 (usable 22,389,387,264 B = 20.85
    GiB), so the message names the GPUs, with a smallest figure above that."""
    greedy = dataclasses.replace(calibration.CALIBRATION, allocator_overhead=10.0)
    problem = search.fit_error(QWEN, L4_SHAPE, G6, workload.SHARDINGS, False, "fp32", greedy)
    assert problem.startswith("--instance-type: qwen2.5-1.5b fits in no layout, micro-batch or recomputation")
    assert float(problem.split("the smallest needs ")[1].split(" GiB")[0]) > 20.85


def test_fit_error_names_the_memory_of_the_resharded_layout_in_full():
    """8 x 4096 without recomputation, full over 8 L4s: weights and moments 12 x 1,543,714,304 / 8 = 2,315,571,456,
    gradients 4 x 1,543,714,304 / 8 = 771,857,152, the root and two layers gathered 2 x (233,375,232 + 2 x
    46,797,824) = 653,941,760, activations 46 x 32,768 x 1,536 x 28 = 64,827,162,624, loss chunk 4 x 2,048 x
    151,936 = 1,244,659,712: 69,813,192,704 B x 1.27 reserved = 82.6 GiB. Recomputation fits."""
    no_recompute = workload.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False)
    problem = search.fit_error(QWEN, no_recompute, G6, workload.SHARDINGS, False, "fp32")
    assert problem.startswith("--activation-checkpointing: 8 x 4096 tokens per micro-batch without recomputation needs "
                              "82.6 GiB/GPU on 2 x g6.12xlarge (24 GB per GPU); micro-batch 8 x 1 accumulation, full "
                              "recomputation")
    assert problem.endswith(" tok/s/GPU), the same tokens per step")


def test_fit_error_on_one_node():
    no_recompute = workload.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False)
    assert search.fit_error(QWEN, no_recompute, workload.cluster_of(*ONE_G6), workload.SHARDINGS, False, "fp32").startswith(
        "--activation-checkpointing: 8 x 4096 tokens per micro-batch without recomputation needs")


def test_fit_error_says_with_recomputation_when_the_micro_batch_is_what_to_change():
    big = workload.Workload(seq_len=4096, micro_batch=16, grad_accum=1, activation_checkpointing=True, loss_chunk_tokens=8192)
    assert search.fit_error(QWEN, big, G6, workload.SHARDINGS, False, "fp32").startswith(
        "--micro-batch: 16 x 4096 tokens per micro-batch with full recomputation needs")


def test_the_batch_search_stops_at_its_limit():
    """bf16 hybrid on 2 g6 nodes at the l4 shape: the links first cost at most 10% at some accumulation A
    (test_batch_line_...); a limit of A finds it, a limit of A - 1 does not."""
    layout = workload.Layout("hybrid", False, "bf16")
    accum = search.link_bound_batch(QWEN, L4_SHAPE, G6, layout).work.grad_accum
    assert accum > 2
    assert search.link_bound_batch(QWEN, L4_SHAPE, G6, layout, limit=accum).work.grad_accum == accum
    assert search.link_bound_batch(QWEN, L4_SHAPE, G6, layout, limit=accum - 1) is None


def test_one_micro_batch_is_enough_when_nothing_crosses_a_link():
    one_gpu = workload.Cluster(gpu=H200, nodes=1, gpus_per_node=1, inter_node_gbps=0.0)
    assert search.link_bound_batch(QWEN, L4_SHAPE, one_gpu, workload.Layout("full")).work.grad_accum == 1


def test_a_batch_that_no_longer_fits_is_not_offered():
    """Hybrid on 2 g6 nodes, 1 x 4096 without recomputation: one micro-batch fits, but from two on FSDP2 keeps an
    unsharded fp32 gradient (4 x 1,543,714,304 = 6.2 GB) beside 46 x 4096 x 1536 x 28 = 8.1 GB of activations:
    ~28 GB reserved of the L4's 22.4 GB usable. The batch whose links cost at most 10% is larger still."""
    work = workload.Workload(seq_len=4096, micro_batch=1, grad_accum=1, activation_checkpointing=False, loss_chunk_tokens=4096)
    assert timing.estimate(QWEN, work, G6, workload.Layout("hybrid")).fits
    assert search.link_bound_batch(QWEN, work, G6, workload.Layout("hybrid")) is None


@pytest.mark.parametrize("seconds,shown", [(90 * 60, "90 min"), (119 * 60, "119 min"), (120 * 60, "2.0 h"),
                                           (120.5 * 60, "2.0 h"), (5 * 3600, "5.0 h")])
def test_durations_read_in_minutes_under_two_hours_else_in_hours(seconds, shown):
    assert search.run_duration(seconds) == shown


@pytest.mark.parametrize("nodes,message", [
    (["a", "a", "a", "b"], "uneven placement: {'a': 3, 'b': 1} workers per node; hybrid sharding needs the same number "
                           "on every node (one worker per GPU, every node's GPUs)"),
    (["a", "b", "a", "b"], "ranks of node a are not consecutive (['a', 'b', 'a', 'b']): a hybrid mesh needs each "
                           "node's workers numbered together"),
])
def test_placement_refusals_in_full(nodes, message):
    with pytest.raises(placement.LayoutError, match=f"^{re.escape(message)}$"):
        placement.node_layout(nodes)


def test_layouts_that_fit_rank_before_those_that_do_not():
    """One g6.12xlarge node, 2 x 4096 with recomputation: keeping the weights gathered adds the whole bf16 model
    (2 x 1.54 B = 3.1 GB) per L4, which no longer fits; resharded does."""
    work = workload.Workload(seq_len=4096, micro_batch=2, grad_accum=4, activation_checkpointing=True, loss_chunk_tokens=4096)
    ranked = search.rank_layouts(QWEN, work, workload.cluster_of(*ONE_G6))
    assert [(e.layout.keep_gathered, e.fits) for e in ranked] == [(False, True), (False, True), (True, False), (True, False)]


def test_smallest_defaults_to_the_fp32_reduction():
    assert search.smallest(QWEN, L4_SHAPE, G6).layout.reduce_dtype == "fp32"


def test_when_nothing_fits_the_smallest_keeps_the_weights_gathered_if_asked():
    """Qwen2.5-14B: kept gathered holds the whole bf16 model instead of the root and two layers: 2 x (14,770,033,664
    - 1,557,140,480 - 2 x 275,268,608) = 25,324,711,936 B more, x 1.27 reserved = 29.95 GiB more per GPU."""
    fourteen = workload.MODELS["qwen2.5-14b"]

    def smallest_gib(keep_gathered: bool) -> float:
        problem = search.fit_error(fourteen, L4_SHAPE, G6, workload.SHARDINGS, keep_gathered, "fp32")
        return float(problem.split("the smallest needs ")[1].split(" GiB")[0])

    assert smallest_gib(True) - smallest_gib(False) == pytest.approx(29.95, abs=0.1)


# ------------------------------------------------------------------ the report and the CLI, in full

def test_plan_cli_accepts_one_node_and_one_step(capsys):
    assert plan.main(["--nodes", "1", "--steps", "1"]) == 0
    assert "\nauto: full+bf16, micro-batch " in capsys.readouterr().out


def test_plan_cli_runs_the_steps_it_is_given_else_200(capsys):
    assert plan.main(["--steps", "50"]) == 0
    assert ", 50 steps in ~" in capsys.readouterr().out
    assert plan.main([]) == 0
    assert ", 200 steps in ~" in capsys.readouterr().out


def test_plan_cli_knows_a_models_hub_id(capsys):
    assert plan.main(["--model", "Qwen/Qwen2.5-1.5B-Instruct"]) == 0
    assert "network 5 GB/s per node), qwen2.5-1.5b, " in capsys.readouterr().out


def test_plan_cli_reads_the_shape_as_numbers(capsys):
    # The l4 profile's batch, 8 GPUs x 1 x 2048 x 4 = 65,536 tokens, at 1,024 tokens a sequence: 4 micro-batches of 2.
    assert plan.main(["--seq-len", "1024", "--micro-batch", "2", "--activation-checkpointing", "full"]) == 0
    assert "qwen2.5-1.5b, 2 x 1024 x 4 micro-batches per GPU, full recomputation (65,536 tokens per step)" in (
        capsys.readouterr().out)


def test_plan_cli_plans_the_lora_rank_it_is_given(capsys):
    """Rank 8: 8 x 41,216 x 28 = 9,232,384 adapters; hybrid over a node's 4 L4s: state (12 x 9,232,384 + 2 x
    1,543,714,304 frozen) / 4 = 799,554,304, the unsharded fp32 accumulator 4 x 9,232,384 = 36,929,536, the root
    and two layers 653,941,760, activations with recomputation 2 x 2048 x 1536 x 28 + 46 x 2048 x 1536 =
    320,864,256, the loss chunk 4 x 2048 x 151,936 = 1,244,659,712: 3,055,949,568 B x 1.27 = 3.6 GiB."""
    assert plan.main(["--lora-rank", "8", "--micro-batch", "1", "--activation-checkpointing", "full"]) == 0
    assert "micro-batch 1 x 4 accumulation, full recomputation: fastest that fits on 2 x g6.12xlarge, ~" in (
        out := capsys.readouterr().out)
    assert "(3.6 GiB/GPU of 24 GB)\n" in out


def test_table_title_and_header():
    assert plan.table(QWEN, L4_SHAPE, G6).splitlines()[:3] == [
        "2 x g6.12xlarge (8 x L4, pcie 32 GB/s per GPU, network 5 GB/s per node), qwen2.5-1.5b, 1 x 2048 x 4 "
        "micro-batches per GPU, full recomputation (65,536 tokens per step)",
        "| layout | step s | compute s | intra-node s (GB) | inter-node s (GB) | bound | tok/s/GPU | MFU | memory GiB | "
        "fits | run | run $ |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |"]


def test_table_rows_give_each_links_gigabytes():
    """hybrid+bf16: inter-node, the bf16 all-reduce 2 x 2 x 1,543,714,304 x 1/2 = 3.1 GB; intra-node, the gathers
    (2 x 1,310,339,072 x 2 x 4 + 2 x 233,375,232) x 3/4 = 16,074,131,712 plus the bf16 reduce-scatter
    2 x 1,543,714,304 x 3/4 = 2,315,571,456: 18.4 GB."""
    row = next(r for r in plan.table(QWEN, L4_SHAPE, G6).splitlines() if r.startswith("| hybrid+bf16 |"))
    assert " (18.4) | " in row and " (3.1) | " in row


def test_table_says_whether_each_layout_fits():
    fits = plan.table(QWEN, L4_SHAPE, G6).splitlines()[3:11]
    assert all(" | yes | " in row for row in fits)
    no_fit = plan.table(QWEN, H200_SHAPE, workload.cluster_of("p5.48xlarge", 2)).splitlines()[3:11]
    assert all(" | NO | " in row for row in no_fit)


def test_table_ends_with_the_basis_of_its_compute_term():
    assert plan.table(QWEN, L4_SHAPE, G6).splitlines()[-2] == calibration.CALIBRATION.basis(GPUS["L4"], L4_SHAPE, QWEN, 4)


def test_batch_line_prices_the_same_tokens_at_the_larger_batch():
    """At 4 micro-batches the links cost 0.606 s of a 3.523 s step (17%); from 8 (131,072 tokens per step, 6.363 s per
    step) at most 10%: 200 x 65,536 = 13,107,200 tokens take 100 steps, 100 x 6.363 = 636.3 s = ~11 min, x 2 x $4.6016
    an hour = $1.63."""
    line = search.batch_line(QWEN, L4_SHAPE, G6, search.choose(QWEN, L4_SHAPE, G6, reduce_dtype="bf16"))
    assert line.startswith("batch: the links cost 17% of the step at 65,536 tokens; from batch_tokens 131,072 ")
    assert line.endswith("the same 13,107,200 tokens in 100 steps, ~11 min, ~$1.63 (a larger batch changes the "
                         "optimisation: retune the learning rate)")


def test_batch_line_when_the_batch_already_keeps_the_links_cheap():
    """At 8 micro-batches the links cost 0.606 s of a 6.363 s step: 9.5%; at 7, 0.606 s of 5.653 s: 10.7%, over 10%."""
    work = workload.Workload(2048, 1, 8, True, 2048)
    line = search.batch_line(QWEN, work, G6, search.choose(QWEN, work, G6, reduce_dtype="bf16"))
    assert line == "batch: 131,072 tokens per step already keeps communication at 10% of the step (at most 10%)"
    seven = workload.Workload(2048, 1, 7, True, 2048)
    assert "from batch_tokens 131,072 " in search.batch_line(QWEN, seven, G6, search.choose(QWEN, seven, G6, reduce_dtype="bf16"))


def test_resolve_sharding_reasons_in_full():
    """Unknown instance type, 8 x 4096 without recomputation, one GPU per node: the hybrid shard is the whole state,
    16 x 1,543,714,304 = 24,699,428,864 B, plus 653,941,760 gathered, 64,827,162,624 of activations and the
    1,244,659,712 loss chunk: 91,425,192,960 B x 1.27 = 108.1 GiB."""
    l4, big = GPUS["L4"], workload.Workload(seq_len=4096, micro_batch=8, grad_accum=1, activation_checkpointing=False)
    assert auto.resolve_sharding("auto", QWEN, L4_SHAPE, 1, 4, l4, None, False, "fp32") == ("full", "one node")
    assert auto.resolve_sharding("auto", QWEN, L4_SHAPE, 2, 4, l4, None, False, "fp32") == (
        "hybrid", "several nodes; a node's GPUs hold the sharded state")
    assert auto.resolve_sharding("auto", QWEN, big, 2, 1, l4, None, False, "fp32") == (
        "full", "several nodes, but a node's GPUs cannot hold the sharded state (108.1 GiB/GPU)")


def test_shape_of_reads_layers_heads_and_head_dim_from_the_config():
    """Qwen2.5-1.5B's published config: 28 layers, 12 heads of 1536 / 12 = 128; an unnamed config is "model"."""
    from training.model import builtin_config

    shape = workload.shape_of(builtin_config("qwen2.5-1.5b"))
    assert (shape.name, shape.layers, shape.heads, shape.head_dim) == ("model", 28, 12, 128)


def test_shape_of_prefers_an_explicit_head_dim_and_the_configs_name():
    """tiny (hidden 64, 4 heads) with head_dim 32: each head is 32 wide, not 64 / 4 = 16."""
    from training.model import builtin_config

    config = builtin_config("tiny")
    config.head_dim, config.name_or_path = 32, "org/tiny-wide-heads"
    shape = workload.shape_of(config)
    assert (shape.name, shape.head_dim) == ("org/tiny-wide-heads", 32)


def test_the_table_and_the_batch_line_use_the_calibration_they_are_given():
    """At a link efficiency of 1.0, full's 24.2 GB across the nodes take 24.156 / 5 GB/s = 4.83 s (8.05 s at 0.60);
    with links a billion times faster, no batch is needed to hide them."""
    perfect = dataclasses.replace(calibration.CALIBRATION, link_efficiency=1.0)
    full_row = next(r for r in plan.table(QWEN, L4_SHAPE, G6, perfect).splitlines() if r.startswith("| full | "))
    assert " | 4.83 (24.2) | " in full_row
    instant = dataclasses.replace(calibration.CALIBRATION, link_efficiency=1e9)
    chosen = search.choose(QWEN, L4_SHAPE, G6, calibration=instant)
    assert search.batch_line(QWEN, L4_SHAPE, G6, chosen, instant) == (
        "batch: 65,536 tokens per step already keeps communication at 0% of the step (at most 10%)")


# ------------------------------------------------------------------ selective recomputation, and auto's picks

def test_selective_recomputation_keeps_half_the_layers_activations_and_the_others_inputs():
    """Qwen2.5-1.5B at 1 x 2,048 (28 layers, hidden 1,536, 46 bytes per token and hidden unit in a layer kept
    whole): one layer's activations are 46 x 2,048 x 1,536 = 144,703,488 B, its bf16 input 2 x 2,048 x 1,536 =
    6,291,456 B. Full: 28 inputs + one layer being recomputed = 176,160,768 + 144,703,488 = 320,864,256. Selective
    (layers 2, 4, ..., 28 recomputed): 14 layers whole, 2,025,848,832, + 14 inputs, 88,080,384, + the recomputed
    one = 2,258,632,704. None: 28 whole layers = 4,051,697,664. Everything else is the same in the three."""
    def memory_at(recomputation: str) -> float:
        work = workload.Workload(2048, 1, 4, recomputation, 2048)
        return memory.memory_bytes(QWEN, work, workload.Layout("hybrid"), shard=4, calibration=calibration.CALIBRATION)

    assert memory_at("selective") - memory_at("full") == 2_258_632_704 - 320_864_256
    assert memory_at("none") - memory_at("selective") == 4_051_697_664 - 2_258_632_704


def test_selective_on_an_odd_number_of_layers_recomputes_the_lower_half():
    """5 layers: training.model recomputes the 2nd and 4th (tests/training/test_activation_checkpointing.py), so 3 stay
    whole. tiny-sized (hidden 64) at 8 tokens: a layer 46 x 8 x 64 = 23,552 B, an input 2 x 8 x 64 = 1,024 B;
    selective 3 x 23,552 + 2 x 1,024 + 23,552 = 96,256, none 5 x 23,552 = 117,760: 21,504 apart."""
    five = dataclasses.replace(workload.MODELS["tiny"], layers=5)
    work = workload.Workload(seq_len=8, micro_batch=1, grad_accum=1, loss_chunk_tokens=8)
    memory_at = lambda r: memory.memory_bytes(five, dataclasses.replace(work, activation_checkpointing=r), workload.Layout(),  # noqa: E731
                                         shard=1, calibration=calibration.CALIBRATION)
    assert memory_at("none") - memory_at("selective") == 117_760 - 96_256


def test_selective_recomputation_costs_the_midpoint_of_none_and_full_on_the_reference_gpu():
    """One H200, 8 x 4096: 32,768 tokens x 11,376,215,040 FLOPs = 3.7278e14 per step. Measured efficiencies 0.727
    without and 0.595 with full recomputation: 3.7278e14 / (788.3e12 x 0.727) = 0.65046 s and / (788.3e12 x 0.595)
    = 0.79477 s; selective, half the layers recomputed, the midpoint 0.72261 s (an efficiency of 0.65441)."""
    one_h200 = workload.Cluster(gpu=H200, nodes=1, gpus_per_node=1, inter_node_gbps=0.0)
    work = workload.Workload(4096, 8, 1, "selective", 8192)
    assert timing.estimate(QWEN, work, one_h200, workload.Layout("full")).compute_s == pytest.approx(0.72261, rel=1e-4)
    assert calibration.CALIBRATION.reference_efficiency(work) == pytest.approx(0.65441, rel=1e-4)


def test_selective_recomputation_costs_the_midpoint_of_the_kernel_profiles_on_another_gpu():
    """1 x 2048 x 4 on an L4. The H200's kernels at 2,048 tokens: without recomputation 683 model TFLOP/s in matmul
    kernels and 12.001 us of memory-bound kernels per token, with full recomputation 563 and 12.305. At 8,192 tokens
    x 10,319,250,432 FLOPs: matmul 0.12377 s and 0.15015 s, midpoint 0.13696 s; memory-bound 0.098312 s and 0.100803 s,
    midpoint 0.099558 s, plus a node's optimizer shard once (12.444 us x 1,543.7M / 4 = 0.004803 s): 0.104360 s. Scaled
    to the L4 (96.45 TFLOP/s, 237.4 GB/s; test_an_l4_step_is_...): 0.13696 x 788.3 / 96.45 = 1.1195 s + 0.104360 x
    3,799 / 237.4 = 1.6698 s = 2.7893 s, above the host's 0.69 s."""
    work = workload.Workload(2048, 1, 4, "selective", 2048)
    assert timing.estimate(QWEN, work, G6, workload.Layout("hybrid")).compute_s == pytest.approx(2.7893, rel=1e-3)
    tflops, memory_us = calibration.CALIBRATION.kernel_profile(work, QWEN)
    assert tflops == pytest.approx(2 / (1 / 683 + 1 / 563)) and memory_us == pytest.approx((12.001 + 12.305) / 2)


def test_the_basis_line_says_selective_is_the_midpoint():
    work = workload.Workload(2048, 1, 4, "selective", 2048)
    for gpu in (H200, GPUS["L4"]):
        assert ("2,048 tokens per micro-batch with selective recomputation, costed at the midpoint of none's and "
                "full's per token") in calibration.CALIBRATION.basis(gpu, work, QWEN)


def test_a_recomputation_setting_the_model_does_not_know_is_refused():
    assert workload.Workload(activation_checkpointing=True).activation_checkpointing == "full"  # recorded runs' booleans
    assert workload.Workload(activation_checkpointing=False).activation_checkpointing == "none"
    with pytest.raises(ValueError, match=r"^activation_checkpointing: 'auto' is not one of none, selective, full$"):
        workload.Workload(activation_checkpointing="auto")


def test_fit_error_names_the_setting_auto_may_not_change():
    """What auto may change is never the advice; what the options fix is."""
    per_gpu = workload.Workload(4096, 4, 1, "none", 4096)  # 4 sequences of 4,096 per GPU per step
    problem = search.fit_error(QWEN, per_gpu, G6, workload.SHARDINGS, False, "bf16", free=("micro_batch",))
    assert problem.startswith("--activation-checkpointing: 4 x 4096 tokens per GPU per step, at any micro-batch, without "
                              "recomputation needs at least ")
    assert "; micro-batch 4 x 1 accumulation, full recomputation fits at " in problem
    big = workload.Workload(4096, 16, 1, "full", 8192)
    problem = search.fit_error(QWEN, big, G6, workload.SHARDINGS, False, "fp32", free=("activation_checkpointing",))
    assert problem.startswith("--micro-batch: 16 x 4096 tokens per micro-batch with any recomputation needs at least ")
    # 7.6B parameters x 16 bytes over a node's 4 L4s is 30 GB a GPU: hybrid cannot fit, full over 16 GPUs can.
    problem = search.fit_error(workload.MODELS["qwen2.5-7b"], workload.Workload(2048, 1, 4, "full", 2048), workload.cluster_of(
        "g6.12xlarge", 4), ("hybrid",), False, "bf16", free=search.SHAPE_OPTIONS)
    assert problem.startswith("--sharding: 4 x 2048 tokens per GPU per step, at any micro-batch, with any recomputation "
                              "needs at least ")
    assert "on 4 x g6.12xlarge (24 GB per GPU) with hybrid sharding; full, micro-batch " in problem


def test_auto_line_names_the_pick_the_reason_and_the_faster_setting_that_does_not_fit():
    """The default deployment: 2 x g6.12xlarge, 4 sequences of 2,048 per GPU per step, bf16 reduction."""
    work = workload.Workload(2048, 4, 1, "full", 2048)
    chosen = search.choose(QWEN, work, G6, reduce_dtype="bf16", shapes=True)
    line = search.auto_line(QWEN, work, G6, chosen, search.SHAPE_OPTIONS)
    assert line.startswith(f"auto: {chosen.layout.name}, {search.describe_shape(chosen.work)}: fastest that fits on "
                           f"2 x g6.12xlarge, ~{chosen.step_s:.2f} s/step, {chosen.memory_gib:.1f} of 20.9 GiB/GPU")
    faster = line.split("; faster but too big: ")[1]
    needs = float(faster.split(", ")[-1].split(" GiB")[0])
    assert needs > 20.85 and "s/step" in faster  # 22,389,387,264 usable bytes = 20.85 GiB
    # Nothing faster left out: no reason to name one.
    fixed = search.choose(QWEN, work, G6, reduce_dtype="bf16")
    assert "faster" not in search.auto_line(QWEN, work, G6, fixed, ())


GPU_TYPES = sorted(name for name, spec in INSTANCE_TYPES.items() if spec.gpu)


@pytest.mark.parametrize("instance_type", GPU_TYPES)
@pytest.mark.parametrize("model", ["qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-14b"])
def test_auto_never_picks_what_does_not_fit(instance_type, model):
    """Every GPU type, built-in model and 1, 2 or 4 nodes, at the cluster's batch (65,536 tokens of 2,048) and the
    h200 profile's (8 x 4,096 on each of 16 GPUs): auto's pick fits, keeps the batch, is the fastest of every layout,
    micro-batch and recomputation that fits (counted here one by one), and each worker's --sharding auto lands on
    its layout; or, exactly when nothing fits, it stops with one line naming the GPUs."""
    from planning.auto import PlanError, resolve_auto, resolve_run
    from training.config import TrainConfig
    from training.config_rules import validate

    spec = INSTANCE_TYPES[instance_type]
    for nodes in (1, 2, 4):
        cluster = workload.cluster_of(instance_type, nodes)
        for seq_len, batch in ((2048, 65_536), (4096, 524_288)):
            asked = TrainConfig(model=model, instance_type=instance_type, workers=cluster.world, seq_len=seq_len,
                                batch_tokens=batch, micro_batch="auto", activation_checkpointing="auto",
                                loss_chunk_tokens=2048, reduce_dtype="bf16")
            per_gpu = batch // (cluster.world * seq_len)
            every = [timing.estimate(workload.MODELS[model], workload.Workload(seq_len, m, per_gpu // m, r, 2048), cluster,
                                   workload.Layout(s, False, "bf16"))
                     for m in range(1, per_gpu + 1) if per_gpu % m == 0 for r in ("none", "selective", "full")
                     for s in (("full", "hybrid") if nodes > 1 else ("full",))]
            # auto's rule: 10% of the usable memory stays free (AUTO_MEMORY_MARGIN).
            fitting = [e for e in every if e.memory_gib * GIB <= memory.usable_bytes(spec.gpu) * 0.9]
            case = f"{model} on {cluster.name}, {batch:,} tokens of {seq_len}"
            if not fitting:
                with pytest.raises(PlanError, match=rf"^--instance-type: {model} fits in no layout, micro-batch or "
                                                    rf"recomputation on {cluster.name} \({spec.gpu.memory_gb:g} GB per GPU\)"
                                                    r": the smallest needs [\d.]+ GiB/GPU, auto allows [\d.]+ \(90% of "
                                                    r"[\d.]+ usable\); use GPUs with more memory, more nodes, or LoRA$"):
                    resolve_run(validate(asked))
                continue
            picked, line = resolve_auto(validate(asked))
            work = workload.Workload(seq_len, picked.micro_batch, picked.grad_accum, picked.activation_checkpointing, 2048)
            sharding = line.removeprefix("auto: ").split("+")[0].split(",")[0]
            mine = timing.estimate(workload.MODELS[model], work, cluster, workload.Layout(sharding, False, "bf16"))
            assert mine.memory_gib * GIB <= memory.usable_bytes(spec.gpu) * 0.9, case
            assert picked.micro_batch * picked.grad_accum * cluster.world * seq_len == batch, case
            fastest = min(e.step_s for e in fitting)
            assert mine.step_s == fastest, case
            assert mine.memory_gib == min(e.memory_gib for e in fitting if e.step_s == fastest), case
            assert auto.resolve_sharding("auto", workload.MODELS[model], work, nodes, spec.gpus, spec.gpu, instance_type,
                                         False, "bf16")[0] == sharding, case
            assert "\n" not in line


# ------------------------------------------------------------------ a shard group of one GPU: the one-GPU step

ONE_GPU = json.loads((RESULTS / "2026-12-01-h200-one-gpu-compute.json").read_text())


def test_the_one_gpu_calibration_is_the_line_through_its_three_runs():
    runs = {c["settings"]["grad_accum"]: c["step_time_s"] for c in ONE_GPU["cases"]
            if c["name"].startswith("one GPU, grad_accum")}
    assert runs == pytest.approx({1: 0.1841, 4: 0.5624, 16: 2.0218}, abs=5e-4)
    per_step, per_micro_batch = calibration.CALIBRATION.one_gpu[(True, 2048)]
    for accum, seconds in runs.items():
        assert per_step + accum * per_micro_batch == pytest.approx(seconds, rel=0.03)


def test_only_a_shard_group_of_one_gpu_computes_at_the_one_gpu_rate():
    """4 micro-batches of 1 x 2048 with recomputation: one GPU, 0.0667 + 4 x 0.1223 = 0.5559 s; a 2-GPU group,
    8,192 tokens x 10.319 GFLOP / (788.3 TFLOP/s x 0.142) = 0.7552 s."""
    work = workload.Workload(2048, 1, 4, "full", 2048)
    assert calibration.CALIBRATION.compute_seconds(H200, work, QWEN, shard=1) == pytest.approx(0.5559, rel=1e-3)
    assert calibration.CALIBRATION.compute_seconds(H200, work, QWEN, shard=2) == pytest.approx(0.7552, rel=1e-3)
    selective = dataclasses.replace(work, activation_checkpointing="selective")  # not measured on one GPU
    assert calibration.CALIBRATION.compute_seconds(H200, selective, QWEN, shard=1) == pytest.approx(
        calibration.CALIBRATION.compute_seconds(H200, selective, QWEN, shard=2))


def test_auto_leaves_a_tenth_of_memory_free_but_a_fixed_shape_may_use_it_all():
    """2 x g6.12xlarge, 4 x 2048 selective: 20.2 GiB of the L4's 20.85 usable fits, but not under 90% of it
    (18.77): auto takes full recomputation (11.1 GiB); the same selective shape set by hand is accepted."""
    selective = workload.Workload(2048, 4, 1, "selective", 2048)
    estimate = timing.estimate(QWEN, selective, G6, workload.Layout("hybrid", False, "bf16"))
    assert estimate.fits and 18.77 < estimate.memory_gib < 20.85
    picked = search.choose(QWEN, selective, G6, reduce_dtype="bf16", shapes=True)
    assert (picked.work.micro_batch, picked.work.activation_checkpointing) == (4, "full")
    assert search.fit_error(QWEN, selective, G6, ("hybrid",), False, "bf16") is None


def test_a_two_gpu_step_is_the_one_gpu_per_step_share_plus_its_micro_batches():
    """The 2-GPU efficiency at 1 x 2048 came from 4-micro-batch runs: 0.7552 s a step. Less the one-GPU per-step
    0.0667 s, each micro-batch is (0.7552 - 0.0667) / 4 = 0.17213 s; one micro-batch: 0.0667 + 0.17213 = 0.23883 s
    (the full suite's capped l4 case measured 0.2259 s), sixteen: 0.0667 + 16 x 0.17213 = 2.8208 s."""
    for accum, seconds in ((1, 0.23883), (4, 0.7552), (16, 2.8208)):
        work = workload.Workload(2048, 1, accum, "full", 2048)
        assert calibration.CALIBRATION.compute_seconds(H200, work, QWEN, shard=2) == pytest.approx(seconds, rel=1e-3)


def test_the_last_backward_carries_its_layers_re_gathers_beside_the_reductions():
    """One g6.12xlarge (4 L4s over PCIe, 60% of 32 GB/s = 19.2 GB/s), full sharding, one micro-batch of 1 x 512, no
    recomputation: 0.47626 s of compute, the optimizer 0.07684 s, the backward 0.22714 s. Over 4 ranks (x 3/4): the
    root's gather, 2 x 233,375,232 B = 0.01823 s, in series; the forward's layer gathers, 2 x 1,310,339,072 B =
    0.10237 s, hide behind its 0.17228 s; the backward re-gathers every layer (0.10237 s) beside the fp32
    reduce-scatter (4 x 1,310,339,072 B = 0.20474 s), and starts with the last layer's gather, so nothing waits
    before the link's 0.30711 s, which outlast the backward; then the root's reduce-scatter (4 x 233,375,232 B =
    0.03646 s) and the optimizer. Counted in the forward's phase, the re-gathers would hide: 0.5634 s."""
    e = timing.estimate(QWEN, workload.Workload(512, 1, 1, "none", 2048), workload.cluster_of("g6.12xlarge", 1),
                      workload.Layout("full"))
    assert e.compute_s == pytest.approx(0.47626, rel=1e-4)
    assert e.step_s == pytest.approx(0.01823 + 0.17228 + 0.30711 + 0.03646 + 0.07684, rel=1e-4)


def test_one_node_waits_on_its_in_node_link():
    """The case above has no network: its 0.13466 s beyond the compute (22% of the step) are all PCIe's."""
    e = timing.estimate(QWEN, workload.Workload(512, 1, 1, "none", 2048), workload.cluster_of("g6.12xlarge", 1),
                      workload.Layout("full"))
    assert e.bound == "intra-node link-bound"


@pytest.mark.parametrize("layout", [workload.Layout("hybrid"), workload.Layout("full", keep_gathered=True),
                                    workload.Layout("hybrid", reduce_dtype="bf16")])
def test_the_bound_and_the_batch_line_share_one_rule(layout):
    """The first batch the batch line offers is the first the bound calls compute-bound, and all below it are
    link-bound."""
    work = workload.Workload(2048, 1, 1, True, 2048)
    first = search.link_bound_batch(QWEN, work, G6, layout)
    assert first is not None and first.bound == "compute-bound"
    for accum in range(1, first.work.grad_accum):
        assert timing.estimate(QWEN, dataclasses.replace(work, grad_accum=accum), G6, layout).bound != "compute-bound"


def test_the_root_re_gathered_before_every_micro_batch_waits_in_series_each_time():
    """The trainer as the recorded runs had it (Layout.root_regathered): 2 H200s as two nodes over a 3.219 GB/s
    link, full sharding, 4 micro-batches of 1 x 2048: each of the 3 extra root gathers, 2 x 233,375,232 B x 1/2 at
    3.219 GB/s = 0.07250 s, lands before its micro-batch computes: 0.2175 s longer."""
    cluster = h200_cluster(2, sockets=True)
    work = workload.Workload(2048, 1, 4, True, 2048)
    now = timing.estimate(QWEN, work, cluster, workload.Layout("full"))
    before = timing.estimate(QWEN, work, cluster, workload.Layout("full", root_regathered=True))
    assert before.step_s - now.step_s == pytest.approx(3 * 0.07250, rel=1e-3)
    assert before.inter_bytes - now.inter_bytes == pytest.approx(3 * 233_375_232)
