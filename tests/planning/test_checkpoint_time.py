"""The time a drained pod needs to save its step (planning/checkpoint_time.py), as worked examples."""

from __future__ import annotations

import pytest

from planning.checkpoint_time import StopEstimate, checkpoint_bytes, stop_estimate
from planning.workload import MODELS, cluster_of


def test_qwen_1_5b_full_checkpoint_is_the_19_5_gb_dcp_wrote():
    """docs/benchmarks.md, "Checkpoint stall": one rank held Qwen2.5-1.5B's whole checkpoint, 19.5 GB."""
    assert checkpoint_bytes(MODELS["qwen2.5-1.5b"], lora_rank=0) == pytest.approx(19.5e9, rel=0.01)


def test_lora_saves_the_adapters_state_and_the_frozen_bf16_base():
    """Rank 16 on every linear layer: 16 x (in + out features) per layer x 28 layers of 12-byte state, beside the
    1.54e9 base weights at 2 bytes: 3.1 GB, a sixth of the full checkpoint."""
    shape = MODELS["qwen2.5-1.5b"]
    adapters = 16 * shape.linear_in_out * shape.layers
    assert checkpoint_bytes(shape, lora_rank=16) == pytest.approx((12 * adapters + 2 * shape.params) * 19.5 / 18.5)
    assert checkpoint_bytes(shape, lora_rank=16) < checkpoint_bytes(shape, lora_rank=0) / 5


def test_the_default_cluster_saves_a_step_in_35_s_and_gets_70_s():
    """2 x g6.12xlarge, a 2.109 s step: 9.75 GB a node; each of 4 ranks writes 2.44 GB at the measured 848 MB/s
    (19.5 GB in 23 s) = 2.9 s, the node uploads 9.75 GB over 4 connections of 85 MB/s = 28.7 s, the commit 1 s:
    34.7 s; plus 30 s = 64.7, rounded up to 70 s."""
    found = stop_estimate(MODELS["qwen2.5-1.5b"], 0, cluster_of("g6.12xlarge", 2), step_s=2.109)
    assert found.bytes_per_node == pytest.approx(9.75e9, rel=0.01)
    assert found.write_s == pytest.approx(2.44e9 / (19.5e9 / 23), rel=0.01)
    assert found.upload_s == pytest.approx(9.75e9 / 340e6, rel=0.01)
    assert found.needed_s == pytest.approx(34.7, abs=0.2)
    assert found.grace_s == 70


def test_the_upload_is_bound_by_the_nodes_network_where_that_is_slower():
    """A node of 8 GPUs with a 1 Gbit/s link: 8 x 85 MB/s would be 680 MB/s, the link carries 125 MB/s."""
    from planning.workload import Cluster

    node = cluster_of("g6.48xlarge", 1)
    slow = Cluster(gpu=node.gpu, nodes=1, gpus_per_node=8, inter_node_gbps=0.125)
    found = stop_estimate(MODELS["qwen2.5-1.5b"], 0, slow, step_s=1.0)
    assert found.upload_s == pytest.approx(found.bytes_per_node / 125e6)


def test_the_grace_period_rounds_up_to_ten_seconds():
    assert StopEstimate(bytes_per_node=0, step_s=0.5, write_s=0.0, upload_s=8.5).grace_s == 40  # 0.5 + 9.5 + 30 = 40
    assert StopEstimate(bytes_per_node=0, step_s=0.6, write_s=0.0, upload_s=8.5).grace_s == 50  # 40.1 -> 50
