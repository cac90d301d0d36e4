"""planning.calibration: the one-GPU step line was measured on the profiled model only."""

from __future__ import annotations

import dataclasses

import pytest

from planning import calibration, workload

L4_SHAPE = workload.Workload(seq_len=2048, micro_batch=1, grad_accum=4, activation_checkpointing="full",
                             loss_chunk_tokens=2048)


@pytest.mark.parametrize("grad_accum,shard", [(4, 1), (8, 2), (8, 1)])
def test_another_model_at_the_one_gpu_shape_is_timed_by_the_efficiency_not_the_profiled_models_step(grad_accum, shard):
    """Qwen2.5-7B at 1 x 2048 with recomputation: 6 x 7,615,616,512 + 12 x 28 x 28 x 128 x 2,048 = 48,159,949,824
    FLOPs a token, x 2,048 tokens a micro-batch over 788.3 TFLOP/s x 14.2% = 0.88112 s a micro-batch, whatever the
    shard group. The one-GPU line (0.0667 s + 0.1223 s a micro-batch) is Qwen2.5-1.5B's own step and does not apply."""
    seven = workload.MODELS["qwen2.5-7b"]
    work = dataclasses.replace(L4_SHAPE, grad_accum=grad_accum)
    expected = grad_accum * 48_159_949_824 * 2048 / (788.3e12 * 0.142)
    assert calibration.CALIBRATION.measured_seconds(work, seven, shard) == pytest.approx(expected, rel=1e-9)
