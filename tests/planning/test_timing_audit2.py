"""planning.timing under LoRA: the frozen root (embedding, final norm) has no gradient to reduce."""

from __future__ import annotations

import pytest

from planning import timing, workload

QWEN = workload.MODELS["qwen2.5-1.5b"]


@pytest.mark.parametrize("nodes,sharding", [(1, "full"), (2, "hybrid")])
def test_under_lora_the_reduction_dtype_changes_no_exposed_time(nodes, sharding):
    """Rank 8 on g6.12xlarge: the only gradients are the adapters' 8 x 41,216 x 28 = 9,232,384, whose fp32
    reductions (at most 2 x 4 B x 9,232,384 x 1/2 = 37 MB across nodes at 3 GB/s: 12 ms) hide behind the last
    backward, in fp32 as in bf16. A root gradient (233,375,232 parameters, reduced after all compute) would show."""
    cluster = workload.cluster_of("g6.12xlarge", nodes)
    work = workload.Workload(2048, 1, 4, "full", 2048, lora_rank=8)
    fp32, bf16 = (timing.estimate(QWEN, work, cluster, workload.Layout(sharding, False, dtype)) for dtype in ("fp32", "bf16"))
    assert fp32.step_s == pytest.approx(bf16.step_s, abs=1e-3)
