"""The measured figures the planner multiplies datasheet figures by, each with the run it came from
(docs/bench-results/).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from planning.workload import MODELS, ModelShape, Workload
from training.gpus import GPUS, GpuSpec


@dataclass(frozen=True)
class Calibration:
    """Measured figures the model multiplies datasheet figures by; each names the run it came from.

    Compute, two rooflines: on the reference GPU the step's compute time is the measured one (its
    efficiencies, fractions of its *measured* bf16 matmul peak). Another GPU runs the same kernels: the
    reference GPU's kernel profile splits a step into matmul/attention kernels, whose time scales with the
    matmul peak, and memory-bound kernels, whose time scales with memory bandwidth. Each ceiling is the
    GPU's measured one where there is one, else its datasheet figure times the reference GPU's
    measured-over-datasheet fraction (an assumption, stated in the output). The reference GPU's own step
    time stays a floor: the host's launches and everything outside the kernels take at least that long.
    """

    reference_gpu: str
    """The GPU model the efficiencies and the kernel profile were measured on."""
    matmul_peak_tflops: dict
    """Measured bf16 matmul peak, TFLOP/s, per GPU model."""
    memory_bandwidth_gbps: dict
    """Measured device-to-device copy bandwidth (bytes read plus bytes written), GB/s, per GPU model."""
    efficiency: dict
    """Model FLOP/s over the reference GPU's measured matmul peak, by (activation checkpointing, tokens
    per micro-batch): a small micro-batch on a large GPU is dominated by overheads (launches, the
    elementwise and memory-bound kernels) that a large one amortises."""
    kernels: dict
    """The reference GPU's kernel profile of one step on one GPU, by (activation checkpointing, tokens per
    micro-batch): (model TFLOP/s over the time of the matmul and attention kernels, recomputation included;
    microseconds of memory-bound kernels per token, the optimizer step's share taken out)."""
    step_memory_us_per_mparam: float
    """Memory-bound microseconds per million trained parameters a GPU holds, once per optimizer step (the AdamW
    update and the gradient clipping, over each GPU's shard), on the reference GPU."""
    profiled_model: str
    """The model (MODELS) the kernel profile ran."""
    one_gpu: dict
    """The reference GPU's measured step of the profiled model with a shard group of one GPU (FSDP over one
    rank issues no collective per micro-batch), by (full recomputation, tokens per micro-batch): (seconds per
    step, seconds per micro-batch), the line through its runs at 1, 4 and 16 micro-batches. The efficiencies
    come from 2-GPU groups, which also wait on two gathers per layer and micro-batch: at 1 x 2,048, where the
    host is the bound, that is a third of their step. Their per-step share is taken to be this one (the
    optimizer's launches and work, the loss scale's count), the rest of their step per micro-batch."""
    efficiency_accumulation: dict
    """Micro-batches per step of the runs each efficiency was measured at (1 where not named): what a step
    of another accumulation scales from."""
    link_efficiency: float
    """NCCL bus bandwidth of large collectives over the nominal link bandwidth."""
    activation_bytes: float
    """Bytes kept per token, hidden unit and layer for backward without recomputation (bf16 activations)."""
    loss_chunk_bytes: float
    """Peak bytes per token and vocabulary entry of one fused LM-head + loss chunk."""
    allocator_overhead: float
    """Reserved over allocated memory of PyTorch's caching allocator: what must fit in the GPU."""
    source: str

    @property
    def peak_fraction(self) -> float:
        """The reference GPU's measured matmul peak over its datasheet peak."""
        return self.matmul_peak_tflops[self.reference_gpu] / GPUS[self.reference_gpu].bf16_tflops

    @property
    def bandwidth_fraction(self) -> float:
        """The reference GPU's measured copy bandwidth over its datasheet bandwidth."""
        return self.memory_bandwidth_gbps[self.reference_gpu] / GPUS[self.reference_gpu].memory_bandwidth_gbps

    def matmul_peak(self, gpu: GpuSpec) -> float:
        """TFLOP/s the matmul kernels run at: measured, or the datasheet's at the reference GPU's fraction."""
        return self.matmul_peak_tflops.get(gpu.name, gpu.bf16_tflops * self.peak_fraction)

    def bandwidth(self, gpu: GpuSpec) -> float:
        """GB/s the memory-bound kernels run at: measured, or the datasheet's at the reference GPU's fraction."""
        return self.memory_bandwidth_gbps.get(gpu.name, gpu.memory_bandwidth_gbps * self.bandwidth_fraction)

    def reference_efficiency(self, work: "Workload") -> float:
        """The reference GPU's efficiency at the workload's shape: the measured points of its recomputation
        setting, linear in log2(tokens per micro-batch) between them, flat beyond the ends. Sizes measured only
        with the other setting join in at the ratio of the two settings where both were measured. Selective
        recomputation was not measured: it recomputes half the layers, so its time per token is taken as the
        midpoint of none's and full's."""
        if work.activation_checkpointing == "selective":
            return 2 / sum(1 / self.reference_efficiency(w) for w in _none_and_full(work))
        ac = work.activation_checkpointing == "full"
        own = {t: e for (r, t), e in self.efficiency.items() if r == ac}
        both = [t for t in own if (not ac, t) in self.efficiency]
        if both:
            ratio = own[max(both)] / self.efficiency[(not ac, max(both))]
            own = {t: e * ratio for (r, t), e in self.efficiency.items() if r != ac} | own
        return _interpolate(own, work.seq_len * work.micro_batch)

    def kernel_profile(self, work: "Workload", model: "ModelShape") -> tuple[float, float]:
        """(matmul TFLOP/s of model FLOPs, memory-bound microseconds per token) on the reference GPU at the
        workload's shape, for `model`. Each is a cost per token plus a cost per micro-batch spread over its
        tokens: a + b / tokens, through the two profiled sizes of its recomputation setting. For a model other
        than the profiled one, the memory-bound per-token cost (activations: normalisations, SwiGLU, RoPE)
        scales with layers x hidden size, the per-micro-batch cost (casting and copying the gathered weights,
        adding the gradients) with the parameter count. Selective recomputation: the midpoint of none's and
        full's costs per token (seconds per matmul TFLOP, memory-bound microseconds), as it recomputes half the layers."""
        if work.activation_checkpointing == "selective":
            (tflops_none, us_none), (tflops_full, us_full) = (self.kernel_profile(w, model) for w in _none_and_full(work))
            return 2 / (1 / tflops_none + 1 / tflops_full), (us_none + us_full) / 2
        own = {t: k for (r, t), k in self.kernels.items() if r == (work.activation_checkpointing == "full")}
        tokens = work.seq_len * work.micro_batch
        seconds_per_tflop = _per_token_and_per_batch({t: 1 / k[0] for t, k in own.items()}, tokens)
        per_token, per_batch = _cost_terms({t: k[1] for t, k in own.items()})
        profiled = MODELS[self.profiled_model]
        activations = model.layers * model.hidden / (profiled.layers * profiled.hidden)
        weights = model.params / profiled.params
        return 1 / seconds_per_tflop, per_token * activations + per_batch * weights / tokens

    def kernel_seconds(self, gpu: GpuSpec, work: "Workload", model: "ModelShape", shard: int = 1) -> tuple[float, float]:
        """Seconds of matmul kernels and of memory-bound kernels of one step of `model` at this shape on `gpu`, whose
        optimizer updates the trained parameters' 1/shard share once per step."""
        matmul_tflops, memory_us = self.kernel_profile(work, model)
        reference = GPUS[self.reference_gpu]
        flops = model.flops_per_token(work.seq_len) * work.tokens_per_step
        matmul_s = flops / (matmul_tflops * 1e12) * self.matmul_peak(reference) / self.matmul_peak(gpu)
        memory_s = work.tokens_per_step * memory_us * 1e-6 * self.bandwidth(reference) / self.bandwidth(gpu)
        return matmul_s, memory_s + self.optimizer_seconds(gpu, model, work.lora_rank, shard)

    def optimizer_seconds(self, gpu: GpuSpec, model: "ModelShape", lora_rank: int, shard: int) -> float:
        """The once-a-step memory-bound work (clipping, the fused AdamW update) over the trained parameters'
        1/shard share, at `gpu`'s memory bandwidth."""
        per_step_us = self.step_memory_us_per_mparam * model.trained_params(lora_rank) / shard / 1e6
        return per_step_us * 1e-6 * self.bandwidth(GPUS[self.reference_gpu]) / self.bandwidth(gpu)

    def measured_seconds(self, work: "Workload", model: "ModelShape", shard: int = 2, gathered: bool = False) -> float:
        """The reference GPU's step compute at this shape: its measured efficiency applied to the model's FLOPs;
        where the one-GPU step was measured, that step for a shard group of one GPU, and for larger groups its
        per-step share plus the rest of the efficiency's step per micro-batch. With the weights kept `gathered`
        through accumulation, only the first micro-batch's forward waits on one gather per layer (of the two
        the efficiency's micro-batches waited on); the others compute as on one GPU."""
        flops = model.flops_per_token(work.seq_len) * work.tokens_per_step
        seconds = flops / (self.matmul_peak(GPUS[self.reference_gpu]) * 1e12 * self.reference_efficiency(work))
        key = (work.activation_checkpointing == "full", work.seq_len * work.micro_batch)
        if model.name != self.profiled_model or work.activation_checkpointing == "selective" or key not in self.one_gpu:
            return seconds
        per_step, one_gpu_micro_batch = self.one_gpu[key]
        if shard == 1:
            return per_step + work.grad_accum * one_gpu_micro_batch
        # The efficiency's runs took per_step + their micro-batches x the rest; this step has grad_accum of them.
        measured = self.efficiency_accumulation.get(key, 1)
        per_micro_batch = (seconds / work.grad_accum * measured - per_step) / measured
        if gathered:
            return per_step + work.grad_accum * one_gpu_micro_batch + (per_micro_batch - one_gpu_micro_batch) / 2
        return per_step + work.grad_accum * per_micro_batch

    def host_seconds(self, work: "Workload", model: "ModelShape", shard: int = 2, gathered: bool = False) -> float:
        """What the host's launches take: the reference GPU's measured step of the profiled model at this shape and
        layout (at 1 x 2,048 the H200 idles 56% of it), per layer: launches grow with the layers, not with FLOPs."""
        profiled = MODELS[self.profiled_model]
        return self.measured_seconds(work, profiled, shard, gathered) * model.layers / profiled.layers

    def compute_seconds(self, gpu: GpuSpec, work: "Workload", model: "ModelShape", shard: int = 2,
                        gathered: bool = False) -> float:
        """The reference GPU's measured time (with a shard group of `shard` GPUs, the weights kept `gathered` through
        accumulation or not); another GPU's kernels scaled by its two ceilings, or the host's time if they take less."""
        if gpu.name == self.reference_gpu:
            return self.measured_seconds(work, model, shard, gathered)
        return max(self.host_seconds(work, model, shard, gathered), sum(self.kernel_seconds(gpu, work, model, shard)))

    def basis(self, gpu: GpuSpec, work: "Workload", model: "ModelShape", shard: int = 1) -> str:
        """One line: what the compute term of this GPU rests on (the optimizer over a shard group of `shard`)."""
        ref, tokens = self.reference_gpu, work.seq_len * work.micro_batch
        shape = f"{tokens:,} tokens per micro-batch" + {
            "none": "", "full": " with recomputation",
            "selective": " with selective recomputation, costed at the midpoint of none's and full's per token"}[
            work.activation_checkpointing]
        measured = (f"{ref} at its measured bf16 matmul peak {self.matmul_peak(GPUS[ref]):.0f} TFLOP/s "
                    f"({GPUS[ref].bf16_tflops:g} datasheet) x {self.reference_efficiency(work):.1%} efficiency at {shape}")
        if gpu.name == ref:
            return f"compute basis: {measured}; MFU is against the datasheet peak"
        matmul_s, memory_s = self.kernel_seconds(gpu, work, model, shard)
        host_s, kept_s = (self.host_seconds(work, model, shard, gathered) for gathered in (False, True))
        if matmul_s + memory_s <= host_s:
            kept = f" ({kept_s:.2f} s with the weights kept gathered)" if f"{kept_s:.2f}" != f"{host_s:.2f}" else ""
            return (f"compute basis: {gpu.name}'s kernels ({matmul_s:.2f} s matmul + {memory_s:.2f} s memory-bound) take "
                    f"less than the host's launches, {host_s:.2f} s{kept}: the {ref}'s measured step of "
                    f"{self.profiled_model} at {shape}, per layer; MFU is against the datasheet peak")

        def ceiling(value: float, measured_here: bool, datasheet: float, fraction: float, unit: str, what: str) -> str:
            if measured_here:
                return f"{value:,.0f} {unit} measured"
            return f"{value:,.0f} {unit} = {datasheet:g} datasheet x {fraction:.3f}, the {ref}'s measured {what} fraction"

        matmul_tflops, memory_us = self.kernel_profile(work, model)
        peak = ceiling(self.matmul_peak(gpu), gpu.name in self.matmul_peak_tflops, gpu.bf16_tflops, self.peak_fraction,
                       "TFLOP/s", "matmul")
        bandwidth = ceiling(self.bandwidth(gpu), gpu.name in self.memory_bandwidth_gbps, gpu.memory_bandwidth_gbps,
                            self.bandwidth_fraction, "GB/s", "copy")
        return (f"compute basis: {gpu.name}: matmul kernels at {peak}, memory-bound kernels at {bandwidth}; the {ref}'s "
                f"kernel profile at {shape} ({matmul_tflops:.0f} model TFLOP/s in matmul kernels, {memory_us:.2f} us of "
                f"memory-bound kernels per token, and {self.step_memory_us_per_mparam:.1f} us per million parameters of "
                f"each GPU's optimizer shard once a step, here 1/{shard}) gives {matmul_s:.2f} s + {memory_s:.2f} s per step; "
                f"MFU is against the datasheet peak")


def _none_and_full(work: "Workload") -> tuple["Workload", "Workload"]:
    """Selective recomputation's two measured neighbours: the same shape without and with full recomputation."""
    return tuple(dataclasses.replace(work, activation_checkpointing=ac) for ac in ("none", "full"))


def _cost_terms(points: dict) -> tuple[float, float]:
    """(a, b) of a per-token cost a + b / tokens through the two profiled sizes (the smallest and the largest):
    a per token, b per micro-batch. Both must come out positive, or the profile is not of this kind of cost."""
    small, large = min(points), max(points)
    b = (points[small] - points[large]) / (1 / small - 1 / large)
    a = points[large] - b / large
    if a <= 0 or b < 0:
        raise ValueError(f"kernel profile {points}: not a per-token plus per-micro-batch cost (a={a:.4g}, b={b:.4g})")
    return a, b


def _per_token_and_per_batch(points: dict, tokens: float) -> float:
    a, b = _cost_terms(points)
    return a + b / tokens


def _interpolate(points: dict, x: float) -> float:
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]]
    for lo, hi in zip(xs, xs[1:]):
        if x <= hi:
            share = (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            return points[lo] + share * (points[hi] - points[lo])
    return points[xs[-1]]


# docs/bench-results/2026-11-30-h200x2-*.json (2 x H200, Qwen2.5-1.5B, torch.compile, bf16, random tokens):
# - matmul peak: 788.3 TFLOP/s, the full suite's (`make bench`) median 8192^3 product; 989 on the datasheet.
# - compute: tokens/s per GPU x FLOPs per token (11.376 GFLOP at seq 4096, 10.319 at 2048) / 788.3 TFLOP/s:
#   no recomputation, 4 x 4096 (variants): 45,961 -> 0.663; 8 x 4096 (full suite, default): 50,397 -> 0.727;
#   12 x 4096 (variants): 49,818 -> 0.719. Recomputation, 8 x 4096 (variants): 41,228 -> 0.595; 1 x 2048 x 4
#   accumulation: 10,880 -> 0.142, the mean of its seven runs in three suites (l4: 11,850; layouts over NVLink:
#   9,596, 13,154, 9,691, 9,550; reduce-dtype: 11,209, 11,110), which differ by up to 37% between runs of the
#   same settings. Each ran on 2 GPUs over NVLink, where communication hides. 4 x 2048 (the cluster's auto shape),
#   one GPU, the median of five runs on four machines (2026-12-01-h200-one-gpu-compute.json and
#   -four-machines.json): 43,698 tok/s without recomputation -> 0.572, 37,221 with -> 0.487. One GPU waits on no
#   gather; before these points the shape was interpolated from 2,048 and 16,384 tokens, 8-18% slow.
# - kernels (2026-11-30-h200-kernel-profile.json, `python -m benchmarks.kernel_profile`, one H200): matmul and
#   attention kernels' seconds and memory-bound kernels' seconds of one step, as model TFLOP/s over the
#   matmul seconds and microseconds per token: 8 x 4096, no recomputation: 32,768 tokens x 11.376 GFLOP /
#   0.5185 s = 719 TFLOP/s, 0.1207 s / 32,768 = 3.684 us; with recomputation: 594, 3.840; 1 x 2048 x 4
#   with recomputation: 8,192 x 10.319 GFLOP / 0.1502 s = 563, 0.1200 s / 8,192 = 14.650 us; without: 683,
#   14.346. The same run's copy bandwidth: 3,799 GB/s (of 4,800). The optimizer step's memory-bound share
#   (2026-12-01-h200-kernel-profile-accumulation.json: the l4 shape at 1 and 16 micro-batches, 42.71 and
#   395.21 ms of memory-bound kernels, so 23.50 ms per micro-batch and 19.21 ms per step) is 19.21 ms /
#   1,543.7M parameters = 12.444 us per million, taken out of each shape's memory-bound time: (120.02 - 19.21)
#   ms / 8,192 = 12.305 us (1 x 2048 x 4, recomputation), 12.001 without; (120.71 - 19.21) / 32,768 = 3.098
#   (8 x 4096), 3.254 with recomputation.
# - link: NCCL over NVLink, 224-314 GB/s bus bandwidth for 64-512 MiB collectives against 450 GB/s
#   nominal: 0.60 (the lower end, the message sizes of one decoder layer).
# - memory: peak allocated 82.1 GiB (h200 profile, no recomputation), 22.6 GiB (same with
#   recomputation) and 16.8 GiB (l4 profile, world size 2) fit the activation and loss-chunk terms
#   (the model gives 79.4, 23.8 and 16.4 GiB; the 22.6 ran after another case of its group, which the benchmark
#   then still held at times, so it may be high: the model stays above it); the l4 profile's 21.3 GiB reserved gives the
#   allocator overhead.
# - one GPU (2026-12-01-h200-one-gpu-compute.json, `--suite accumulation` on one H200): the l4 shape (1 x 2048,
#   recomputation, compile) at 1, 4 and 16 micro-batches, 0.1841, 0.5624 and 2.0218 s per step; least squares:
#   0.0667 s per step + 0.1223 s per micro-batch (within 3% of each run).
# docs/benchmarks.md, "Layouts on the emulated link" and "The planner against every H200 run", check it.
CALIBRATION = Calibration(
    reference_gpu="H200", matmul_peak_tflops={"H200": 788.3}, memory_bandwidth_gbps={"H200": 3799.0},
    efficiency={(False, 8192): 0.572, (False, 16384): 0.663, (False, 32768): 0.727, (False, 49152): 0.719,
                (True, 2048): 0.142, (True, 8192): 0.487, (True, 32768): 0.595},
    kernels={(False, 2048): (683.0, 12.001), (True, 2048): (563.0, 12.305),
             (False, 32768): (719.0, 3.098), (True, 32768): (594.0, 3.254)},
    step_memory_us_per_mparam=12.444,
    profiled_model="qwen2.5-1.5b",
    one_gpu={(True, 2048): (0.0667, 0.1223)}, efficiency_accumulation={(True, 2048): 4},
    link_efficiency=0.60, activation_bytes=46.0, loss_chunk_bytes=4.0, allocator_overhead=1.27,
    source="2 x H200 benchmark runs of 2026-11-30 (docs/bench-results)",
)
