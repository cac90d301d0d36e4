"""What fp8 (`--precision fp8`, training/fp8.py) would change in a step, and what `precision auto` picks.

fp8's step = bf16's step - the GEMM time it saves + the casts it adds:
- GEMMs saved: the converted linear layers' (q, o, gate, up, down) share of the matmul kernels' time, times
  1 - 1 / GEMM_SPEEDUP at the micro-batch's tokens: their forward and both backward GEMMs timed in bf16 and in
  float8 (tensorwise, as torchao runs them) on an H100. On a GPU whose datasheet fp8-over-bf16 ratio differs from
  the H100's, the speedup scales by it. Every decoder-layer parameter counts as converted (k/v, biases and norms
  are under 2% of them on Qwen2.5).
- Weight casts: torchao casts each GPU's shard of the converted weights to float8 before each all-gather, in eager
  kernels (multiply, clamp, copy: WEIGHT_CAST_BYTES a parameter at the GPU's copy bandwidth): once a step with the
  weights kept gathered, twice a micro-batch otherwise (forward, and backward's re-gather).
- Activation casts (the amax and cast of each converted layer's input and output gradient, fused by Inductor):
  ACTIVATION_CAST_S per token and decoder layer at the reference GPU's copy bandwidth, scaled by bandwidth; fitted
  on the one measured H200 step (FIT below).

`precision auto` (resolve_precision) picks fp8 only on a GPU class where fp8's speed and loss parity were measured
(MEASURED_GPUS) and where this model predicts a faster step; bf16 elsewhere, and always with LoRA or without FP8
tensor cores. Elsewhere the prediction is given, named unmeasured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planning.calibration import CALIBRATION, Calibration
from planning.workload import ModelShape, Workload
from training.gpus import GPUS, GpuSpec

# GPU classes where fp8's speed and its loss parity were measured (docs/benchmarks.md, "FP8 users can trust").
MEASURED_GPUS = ("H100", "H200")
# docs/bench-results/2026-12-06-h100-kernel-profile-fp8.json, linear_gemm_tflops: per token count, the converted
# linears' bf16 GEMM time over their float8 time (forward, grad_input, grad_weight; q and o twice, gate and up twice,
# down once), on one H100.
GEMM_SPEEDUP = {2048: 1.2357, 4096: 1.3953, 8192: 1.5254, 32768: 1.7585}
GEMM_GPU = "H100"
# Eager multiply (read and write fp32), clamp (the same), copy to float8 (read fp32, write one byte).
WEIGHT_CAST_BYTES = 4 + 4 + 4 + 4 + 4 + 1
# FIT: issue 39's H200 run (56846e8, torch 2.11, torchao 0.17.0, h200 profile 8 x 4096, one GPU): bf16 642.1 ms,
# fp8 555.7 ms a step. This model's GEMM saving there is 154.6 ms and its weight casts 7.2 ms, so the activation
# casts took 555.7 - 642.1 + 154.6 - 7.2 = 60.9 ms: over 32,768 tokens x 28 layers, 66.4 ns each
# (tests/planning/test_fp8_plan.py recomputes it).
ACTIVATION_CAST_S = 66.4e-9


@dataclass(frozen=True)
class Fp8Estimate:
    bf16_s: float
    """The step's compute in bf16 (planning.calibration)."""
    gemm_saved_s: float
    weight_casts_s: float
    activation_casts_s: float

    @property
    def fp8_s(self) -> float:
        return self.bf16_s - self.gemm_saved_s + self.weight_casts_s + self.activation_casts_s

    @property
    def gain(self) -> float:
        """bf16's step over fp8's: above 1, fp8 is faster."""
        return self.bf16_s / self.fp8_s


def gemm_speedup(gpu: GpuSpec, tokens: int) -> float:
    """The converted linears' float8 GEMM speedup at this many tokens per micro-batch: the measured points, linear in
    log2(tokens) between them and flat beyond, scaled by the GPU's datasheet fp8/bf16 ratio over the H100's."""
    points = sorted(GEMM_SPEEDUP)
    x = min(max(tokens, points[0]), points[-1])
    lo = max(p for p in points if p <= x)
    hi = min(p for p in points if p >= x)
    share = 0.0 if lo == hi else (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    measured = GEMM_SPEEDUP[lo] + share * (GEMM_SPEEDUP[hi] - GEMM_SPEEDUP[lo])
    reference = GPUS[GEMM_GPU]
    return measured * (gpu.fp8_tflops / gpu.bf16_tflops) / (reference.fp8_tflops / reference.bf16_tflops)


def estimate_fp8(gpu: GpuSpec, work: Workload, model: ModelShape, shard: int = 1, gathered: bool = False,
                 calibration: Calibration = CALIBRATION) -> Fp8Estimate:
    """One GPU's step compute in bf16 and fp8 (a shard group of `shard` GPUs; weights kept `gathered` or not)."""
    bf16_s = calibration.compute_seconds(gpu, work, model, shard, gathered)
    matmul_s, _ = calibration.kernel_seconds(gpu, work, model, shard)
    converted_flops = 6 * model.layer_params / model.flops_per_token(work.seq_len)
    saved = matmul_s * converted_flops * (1 - 1 / gemm_speedup(gpu, work.seq_len * work.micro_batch))
    bandwidth = calibration.bandwidth(gpu) * 1e9
    gathers = 1 if gathered else 2 * work.grad_accum
    weight_casts = gathers * model.layer_params / shard * WEIGHT_CAST_BYTES / bandwidth
    reference_bandwidth = calibration.bandwidth(GPUS[calibration.reference_gpu]) * 1e9
    activations = ACTIVATION_CAST_S * work.tokens_per_step * model.layers * reference_bandwidth / bandwidth
    return Fp8Estimate(bf16_s, saved, weight_casts, activations)


def fp8_refusal(gpu: GpuSpec, lora_rank: int) -> str | None:
    """Why fp8 cannot run here (training.fp8 and training.config refuse it the same way), or None."""
    if gpu.fp8_tflops <= 0:
        return f"the {gpu.name} has no FP8 tensor cores"
    if lora_rank:
        return "LoRA trains in bf16 (fp8 trains full weights)"
    return None


def fp8_line(gpu: GpuSpec, work: Workload, model: ModelShape, shard: int = 1, gathered: bool = False,
             lora_rank: int = 0) -> str:
    """One line for the synth review: fp8's predicted gain on this GPU, and whether it was measured there."""
    refusal = fp8_refusal(gpu, lora_rank)
    if refusal:
        return f"fp8: not available: {refusal}"
    found = estimate_fp8(gpu, work, model, shard, gathered)
    where = ("speed and loss parity measured on this GPU class" if gpu.name in MEASURED_GPUS
             else f"unmeasured on the {gpu.name}: a prediction from the H100/H200 figures")
    return (f"fp8: predicted {found.gain:.2f}x the bf16 step ({found.bf16_s:.3f} s -> {found.fp8_s:.3f} s: GEMMs "
            f"-{found.gemm_saved_s * 1e3:.0f} ms, weight casts +{found.weight_casts_s * 1e3:.0f} ms, activation casts "
            f"+{found.activation_casts_s * 1e3:.0f} ms); {where}")


def resolve_precision(gpu: GpuSpec, work: Workload, model: ModelShape, shard: int = 1, gathered: bool = False,
                      lora_rank: int = 0) -> tuple[str, str]:
    """(bf16 or fp8, why) for `precision auto`: fp8 where it was measured and is predicted faster, else bf16."""
    refusal = fp8_refusal(gpu, lora_rank)
    if refusal:
        return "bf16", refusal
    found = estimate_fp8(gpu, work, model, shard, gathered)
    if gpu.name not in MEASURED_GPUS:
        return "bf16", (f"fp8 is unmeasured on the {gpu.name} (predicted {found.gain:.2f}x); auto picks it only where "
                        f"its speed and loss parity were measured ({', '.join(MEASURED_GPUS)})")
    if found.gain <= 1:
        return "bf16", f"fp8 predicted {found.gain:.2f}x the bf16 step at this shape"
    return "fp8", f"fp8 predicted {found.gain:.2f}x the bf16 step; speed and loss parity measured on the {gpu.name}"
