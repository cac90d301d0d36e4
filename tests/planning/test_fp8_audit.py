"""fp8's GEMM speedup between and beyond the measured token counts, and on a GPU whose datasheet fp8/bf16 ratio is
not the H100's (docs/bench-results/2026-12-06-h100-kernel-profile-fp8.json's points; the datasheets' TFLOP/s)."""

import pytest

from planning.fp8 import gemm_speedup
from training.gpus import GPUS


@pytest.mark.parametrize("tokens, expected", [
    (2048, 1.2357), (4096, 1.3953), (32768, 1.7585),  # the measured points
    (1024, 1.2357), (65536, 1.7585),  # flat beyond them
    (5793, (1.3953 + 1.5254) / 2),  # 2^12.5 tokens: halfway between 4096 and 8192 in log2(tokens)
])
def test_the_h100_speedup_is_the_measured_points_linear_in_log2_tokens(tokens, expected):
    assert gemm_speedup(GPUS["H100"], tokens) == pytest.approx(expected, rel=2e-4)


def test_another_gpus_speedup_scales_by_its_datasheet_ratio_over_the_h100s():
    # L40S: 733 / 362 fp8 over bf16 TFLOP/s; H100: 1979 / 989.
    assert gemm_speedup(GPUS["L40S"], 4096) == pytest.approx(1.3953 * (733 / 362) / (1979 / 989), rel=1e-9)
