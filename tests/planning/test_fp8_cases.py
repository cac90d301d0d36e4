"""planning/fp8.py at its edges: auto's threshold just above a gain of 1 on a measured GPU, and the review line
computed for the run's own shard group."""

from __future__ import annotations

import pytest

from planning import fp8
from planning.calibration import CALIBRATION
from planning.workload import MODELS, Workload
from training.gpus import GPUS

QWEN = MODELS["qwen2.5-1.5b"]


def test_auto_picks_fp8_on_a_measured_gpu_however_small_the_predicted_gain():
    """The rule: fp8 where measured and predicted faster (gain above 1), not only where the gain is large. Micro-batch
    2 x 4096 on an H200 of eight, weights kept gathered: GEMMs of 8192 tokens save little, so the gain is ~1.08x."""
    work = Workload(seq_len=4096, micro_batch=2, grad_accum=1, activation_checkpointing="none", loss_chunk_tokens=8192)
    gain = fp8.estimate_fp8(GPUS["H200"], work, QWEN, 8, gathered=True).gain
    assert 1.0 < gain < 1.1  # the row holds a gain just above the threshold
    precision, why = fp8.resolve_precision(GPUS["H200"], work, QWEN, 8, gathered=True)
    assert precision == "fp8" and why.endswith("measured on the H200")


@pytest.mark.parametrize("shard,weight_casts_ms", [(4, 232), (8, 116)])
def test_the_review_line_counts_the_weight_casts_of_the_runs_shard_group(shard, weight_casts_ms):
    """The l4 profile (4 micro-batches, weights resharded): 8 casts a step of each GPU's shard of Qwen2.5-1.5B's
    1,310,339,072 decoder-layer parameters, 21 bytes each at the L4's copy bandwidth:
    1.310e9 / 4 x 21 x 8 / 237.4 GB/s = 232 ms on 4 GPUs, 116 ms on 8."""
    assert CALIBRATION.bandwidth(GPUS["L4"]) == pytest.approx(237.4, abs=0.1)
    work = Workload(seq_len=2048, micro_batch=1, grad_accum=4, activation_checkpointing="full", loss_chunk_tokens=2048)
    line = fp8.fp8_line(GPUS["L4"], work, QWEN, shard)
    assert f"weight casts +{weight_casts_ms} ms" in line
