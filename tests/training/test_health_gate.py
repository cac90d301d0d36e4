"""The health gate (training/health.py): thresholds from datasheets, and a slow node named over gloo."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training import health
from tests.process_group import leave

NODES = ("node-a", "node-b", "node-c")
# 1 MiB: gloo over loopback moves it in milliseconds; a rank that sleeps 1 s in its all-reduce drops its
# pairs to about 1 MB/s. The planned 0.02 GB/s gives a 10 MB/s floor between the two.
MESSAGE_BYTES = 2**20
PLANNED_GBPS = 0.02
SLOW_S = 1.0


def _gate(rank: int, world: int, store: str, out: str, slow_rank: int | None) -> None:
    os.environ["NODE_NAME"] = NODES[rank]  # one rank per "node", as the downward API names them
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    if rank == slow_rank:
        original = health.timed_all_reduce

        def slow(tensor, group):
            time.sleep(SLOW_S)
            original(tensor, group)

        health.timed_all_reduce = slow
    outcome = {}
    started = time.perf_counter()
    try:
        outcome["result"] = health.run_gate(rank, torch.device("cpu"), MESSAGE_BYTES, PLANNED_GBPS, log=lambda _: None)
    except health.HealthError as error:
        outcome["error"] = str(error)
    outcome["elapsed_s"] = time.perf_counter() - started
    if slow_rank is None:
        try:
            health.run_gate(rank, torch.device("cpu"), MESSAGE_BYTES, PLANNED_GBPS, log=lambda _: None, budget_s=0.0)
        except health.HealthError as error:
            outcome["over_budget"] = str(error)
    with open(f"{out}.{rank}", "w") as file:
        json.dump(outcome, file)
    leave()


def gate_on_three_nodes(tmp_path, slow_rank: int | None) -> list[dict]:
    out = tmp_path / "outcome"
    mp.spawn(_gate, args=(3, str(tmp_path / "store"), str(out), slow_rank), nprocs=3)
    return [json.loads((tmp_path / f"outcome.{rank}").read_text()) for rank in range(3)]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return gate_on_three_nodes(tmp_path_factory.mktemp("healthy"), slow_rank=None)


def test_a_slow_node_fails_every_rank_naming_it_within_the_budget(tmp_path):
    outcomes = gate_on_three_nodes(tmp_path, slow_rank=2)
    for outcome in outcomes:
        assert "result" not in outcome
        # node-c is in both slow pairs (a-c, b-c) and a-b is fast: it alone is named, with the figures.
        assert outcome["error"].startswith("health gate failed: node node-c: link below 0.01 GB/s")
        assert "node-a<->node-c all-reduce" in outcome["error"] and "node-b<->node-c all-reduce" in outcome["error"]
        assert "node-a<->node-b" not in outcome["error"]
        print(f"gate with a slow rank: {outcome['elapsed_s']:.2f} s (budget {health.BUDGET_S:g} s)")
        assert outcome["elapsed_s"] < health.BUDGET_S


def test_healthy_nodes_pass_with_every_pair_measured_within_the_budget(healthy):
    for outcome in healthy:
        assert "error" not in outcome
        pairs = sorted(tuple(link["nodes"]) for link in outcome["result"]["links"])
        assert pairs == [("node-a", "node-b"), ("node-a", "node-c"), ("node-b", "node-c")]
        assert all(link["all_reduce_gbps"] >= 0.01 and link["all_gather_gbps"] >= 0.01
                   for link in outcome["result"]["links"])
        assert outcome["result"]["gpus"] == []  # CPU: the GPU half is skipped
        print(f"healthy gate: {outcome['elapsed_s']:.2f} s, links {outcome['result']['links']}")
        assert outcome["elapsed_s"] < health.BUDGET_S


def test_a_gate_past_its_budget_fails(healthy):
    for outcome in healthy:
        assert "over its 0 s budget" in outcome["over_budget"]


def test_gpu_models_are_read_from_the_cuda_device_name():
    assert health.datasheet_for("NVIDIA L4") == ("L4", 121.0, 24)  # NVIDIA L4 datasheet: 121 TFLOP/s bf16, 24 GB
    assert health.datasheet_for("NVIDIA L40S")[0] == "L40S"  # not the L4 its name starts with
    assert health.datasheet_for("NVIDIA A100-SXM4-40GB")[0] == "A100"
    assert health.datasheet_for("NVIDIA GeForce RTX 4090") is None


def l4(**changes) -> health.GpuFigures:
    figures = dict(node="n", rank=0, device="NVIDIA L4", tflops=80.0, memory_gb=23.8, free_share=0.97, pattern_ok=True)
    return health.GpuFigures(**(figures | changes))


L4_SHEET = ("L4", 121.0, 24)


def test_a_healthy_l4_passes():
    assert health.gpu_failures(l4(), L4_SHEET) == []


def test_an_l4_below_half_its_bf16_peak_fails():
    # 0.5 x 121 TFLOP/s = 60.5: 60.4 fails, 60.6 passes.
    assert health.gpu_failures(l4(tflops=60.4), L4_SHEET) == ["bf16 matmul 60.4 TFLOP/s < 60.5 (0.5 x the L4's 121)"]
    assert health.gpu_failures(l4(tflops=60.6), L4_SHEET) == []


def test_an_l4_missing_memory_fails():
    # 0.9 x 24 GB = 21.6 GB.
    assert health.gpu_failures(l4(memory_gb=21.5), L4_SHEET) == ["memory 21.5 GB < 21.6 (0.9 x the L4's 24 GB)"]


def test_memory_held_by_another_process_fails():
    assert health.gpu_failures(l4(free_share=0.85), L4_SHEET) == [
        "only 85% of memory free (< 90%: another process holds it)"]


def test_a_failed_pattern_check_fails():
    assert health.gpu_failures(l4(pattern_ok=False), L4_SHEET) == ["memory pattern check failed on 256 MiB"]


def test_the_memory_pattern_reads_back_on_cpu():
    assert health.memory_pattern_ok(torch.device("cpu"), size_bytes=2**20)


def link(a: str, b: str, reduce_gbps: float, gather_gbps: float) -> health.LinkFigures:
    return health.LinkFigures((a, b), 93_585_408, reduce_gbps, gather_gbps)


def test_the_link_floor_is_half_the_planned_bandwidth():
    # g6.12xlarge: 40 Gbit/s EFA = 5 GB/s planned, floor 2.5 GB/s.
    assert health.link_failures([link("a", "b", 2.6, 2.6)], 5.0) == []
    assert health.link_failures([link("a", "b", 2.6, 2.4)], 5.0) == [
        "node a or b: link below 2.5 GB/s (0.5 x the planned 5 GB/s): a<->b all-reduce 2.6 GB/s, all-gather 2.4 GB/s"]


def test_without_a_planned_link_nothing_fails():
    assert health.link_failures([link("a", "b", 0.001, 0.001)], None) == []


def test_independent_slow_pairs_name_every_node_in_them():
    slow = health.link_failures([link("a", "b", 1, 1), link("c", "d", 1, 1), link("a", "c", 9, 9)], 5.0)
    assert slow[0].startswith("node a or b or c or d: ")


def test_a_layer_message_is_qwen25_15b_s_layer_in_bf16():
    # Qwen2.5-1.5B publishes 1,543,714,304 parameters (tied embeddings): minus the 151,936 x 1,536 embedding and the
    # final norm's 1,536, over 28 layers, is 46,797,824 per layer; minus q/k/v biases (1,536 + 2 x 256) and two norms
    # (2 x 1,536), 46,792,704 linear weights: 93,585,408 bytes in bf16.
    config = SimpleNamespace(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960)
    assert health.layer_message_bytes(config) == 93_585_408


def test_the_planned_figures_are_refused_at_zero():
    from training.command_line import parse_args
    from training.config import ConfigError

    with pytest.raises(ConfigError, match=r"^--predicted-link-gbps: 0.0 must be above 0$"):
        parse_args(["--predicted-link-gbps", "0"])
    with pytest.raises(ConfigError, match=r"^--predicted-step-seconds: -1.0 must be above 0$"):
        parse_args(["--predicted-step-seconds", "-1"])


def test_the_passed_line_spans_the_slowest_to_the_fastest_gpu():
    # Two L4s measured at 61.5 and 97 TFLOP/s: the line a user reads gives the range low-high.
    result = {"gate_s": 3.5, "predicted_link_gbps": 5.0, "gpus": [{"tflops": 97.0}, {"tflops": 61.5}],
              "links": [{"nodes": ["a", "b"], "all_reduce_gbps": 4.5, "all_gather_gbps": 4.25}]}
    assert health.health_line(result) == (
        "health gate: passed in 3.5 s: 2 GPU(s), bf16 matmul 61.5-97 TFLOP/s; "
        "a<->b all-reduce 4.5 GB/s, all-gather 4.25 GB/s (planned 5 GB/s)")
