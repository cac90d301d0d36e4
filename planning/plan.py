"""What a deployment will do, before anyone pays: `python -m planning.plan --help`.

For an instance type, a number of nodes and the training settings, each sharding layout gets its
FLOPs and the bytes it moves per optimizer step on the intra-node and the inter-node links, the
time of each, which one bounds the step, the tokens/s per GPU, the memory per GPU, and the time
and dollars of the run. auto (`--sharding`, `--micro-batch`, `--activation-checkpointing`) trains with
the fastest layout, micro-batch and recomputation that fit in memory at the same tokens per step, and
never with any that does not; the plan also names a faster setting the options fix, where one fits, and the
smallest batch that keeps the links at most 10% of the step.

Layouts:
- full: FSDP2 over every GPU. Each micro-batch all-gathers every layer's bf16 weights in forward
  and again in backward (the root, embedding and final norm, once a step); the last micro-batch
  reduce-scatters the gradients. On several nodes all of it crosses the inter-node link.
- hybrid: a 2-D mesh, replicas across nodes, shards within a node (HSDP). All-gathers and the
  reduce-scatter stay inside the node; once per step each GPU all-reduces its gradient shard with
  its replicas on the other nodes.
- +gathered: weights stay gathered from the first micro-batch's forward to the last one's
  backward: one all-gather per step instead of two per micro-batch, for the whole bf16 model in memory.
  Only the first micro-batch's forward waits on a gather; where the host bounds the step (an H200 at
  1 x 2048), the others compute as on one GPU.
- +bf16: gradients are reduced in bf16 instead of fp32: half the reduction bytes.

Compute: on the H200, model FLOPs over its measured bf16 matmul peak times the trainer's efficiency measured
at the micro-batch's size; on another GPU, the H200's kernel profile at that size scaled by two rooflines
(matmul kernels by the matmul peak, memory-bound kernels by memory bandwidth; Calibration, and the output's
basis line, say how). Both were measured without and with full recomputation; selective recomputation, which
recomputes half the layers, is costed at the midpoint of the two, per token (one H200 at 4 x 2048 measured it
7% slower).
Communication overlaps compute in two phases: the weight gathers until the last micro-batch's backward, the
gradient reductions during it, beside that backward's re-gathers. Where a link bounds a phase, the compute that
cannot overlap it runs in series with it (estimate says which). The link a step is bound by is the one whose time,
were it free, the step would lose the most of: not always the busiest, whose time may hide behind compute.
Collectives run at the rate measured for each alone; over NCCL sockets they ran 13-22% slower beside compute
(docs/benchmarks.md), which this model does not know.
Collective times follow NCCL's bus-bandwidth convention: all-gather and reduce-scatter of S bytes
over n ranks move S(n-1)/n per rank, an all-reduce 2S(n-1)/n; a ring across nodes carries that
through each node's network. Every figure is a datasheet (training/hardware.py) or calibrated by a
measurement recorded in docs/bench-results/ (CALIBRATION, with the run it came from).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass

from training.config import RECOMPUTATION, SELECTIVE_EVERY
from training.hardware import GIB, GPUS, INSTANCE_TYPES, GpuSpec

SHARDINGS = ("full", "hybrid")
# The rank the planner suggests when full fine-tuning does not fit (peft's examples use 8 to 64).
LORA_RANK_SUGGESTED = 16
REDUCE_DTYPES = {"fp32": 4, "bf16": 2}
# The share of the step the links may take beyond the compute: more, and the step is link-bound and the batch is
# worth raising.
LINK_SHARE_TARGET = 0.10


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts of a decoder-only model (a tied embedding counted once)."""

    name: str
    layer_params: int
    """All decoder layers together."""
    root_params: int
    """What the root FSDP unit holds: the (tied) embedding and the final norm."""
    layers: int
    hidden: int
    heads: int
    head_dim: int
    vocab: int
    linear_in_out: int = 0
    """One decoder layer's linear layers, input plus output features summed: a rank-r LoRA adapter
    on each (peft's all-linear) has r x this many parameters per layer."""

    @property
    def params(self) -> int:
        return self.layer_params + self.root_params

    def trained_params(self, lora_rank: int) -> int:
        """What the optimizer updates: every weight, or LoRA's adapters (all-linear) alone."""
        return lora_rank * self.linear_in_out * self.layers if lora_rank else self.params

    def flops_per_token(self, seq_len: int) -> float:
        """6N + 12 L H Q T, as training.metrics counts it (torchtitan's convention)."""
        return 6 * self.params + 12 * self.layers * self.heads * self.head_dim * seq_len


# Counted on the built-in configurations (training.model.builtin_config; Qwen2.5-14B's published config).
MODELS = {
    "qwen2.5-1.5b": ModelShape("qwen2.5-1.5b", layer_params=1_310_339_072, root_params=233_375_232, layers=28,
                               hidden=1536, heads=12, head_dim=128, vocab=151936, linear_in_out=41_216),
    "qwen2.5-7b": ModelShape("qwen2.5-7b", layer_params=6_525_618_176, root_params=1_089_998_336, layers=28,
                             hidden=3584, heads=28, head_dim=128, vocab=152064, linear_in_out=90_112),
    "qwen2.5-14b": ModelShape("qwen2.5-14b", layer_params=13_212_893_184, root_params=1_557_140_480, layers=48,
                              hidden=5120, heads=40, head_dim=128, vocab=152064, linear_in_out=89_600),
    "tiny": ModelShape("tiny", layer_params=74_240, root_params=32_832, layers=2, hidden=64, heads=4, head_dim=16, vocab=512,
                       linear_in_out=1024),
}


@dataclass(frozen=True)
class Workload:
    """The per-GPU shape of a step, as the trainer's options set it."""

    seq_len: int = 2048
    micro_batch: int = 1
    grad_accum: int = 4
    activation_checkpointing: str = "full"
    """none, selective (every SELECTIVE_EVERY-th decoder layer) or full; True and False, as recorded runs
    and the calibration's keys have it, mean full and none."""
    loss_chunk_tokens: int = 2048
    steps: int = 200
    lora_rank: int = 0
    """0: full fine-tuning; else LoRA adapters of this rank on every linear layer, the base frozen in bf16."""

    def __post_init__(self) -> None:
        ac = self.activation_checkpointing
        if isinstance(ac, bool):
            object.__setattr__(self, "activation_checkpointing", "full" if ac else "none")
        elif ac not in RECOMPUTATION:
            raise ValueError(f"activation_checkpointing: {ac!r} is not one of {', '.join(RECOMPUTATION)}")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.micro_batch * self.grad_accum


@dataclass(frozen=True)
class Cluster:
    gpu: GpuSpec
    nodes: int
    gpus_per_node: int
    inter_node_gbps: float
    """GB/s one way through each node's network (all its GPUs share it)."""
    usd_per_hour: float = 0.0
    """All nodes together."""
    name: str = ""

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


def cluster_of(instance_type: str, nodes: int) -> Cluster:
    spec = INSTANCE_TYPES[instance_type]
    return Cluster(gpu=spec.gpu, nodes=nodes, gpus_per_node=spec.gpus, inter_node_gbps=spec.network_gbps,
                   usd_per_hour=spec.usd_per_hour * nodes, name=f"{nodes} x {instance_type}")


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


@dataclass(frozen=True)
class Layout:
    sharding: str = "full"
    keep_gathered: bool = False
    reduce_dtype: str = "fp32"
    root_regathered: bool = False
    """The root gathered again before every micro-batch, as the trainer did until 2026-12-02 (training.step now
    keeps it gathered until the step's last backward); the benchmark runs recorded before then measured that."""

    @property
    def name(self) -> str:
        return self.sharding + ("+gathered" if self.keep_gathered else "") + ("+bf16" if self.reduce_dtype == "bf16" else "")


ALL_LAYOUTS = tuple(Layout(s, k, r) for s in SHARDINGS for k in (False, True) for r in REDUCE_DTYPES)


@dataclass(frozen=True)
class Estimate:
    layout: Layout
    work: Workload
    """The per-GPU shape it was estimated at."""
    flops_per_step: float
    """Model FLOPs per GPU per optimizer step (recomputation not counted)."""
    intra_bytes: float
    """Bytes each GPU moves per step over the intra-node link (bus bytes)."""
    inter_bytes: float
    """Bytes each node moves per step through its network, one way."""
    compute_s: float
    intra_s: float
    inter_s: float
    exposed_s: float
    """Step time beyond the compute: communication that found no compute to hide behind."""
    step_s: float
    memory_gib: float
    """Peak reserved memory per GPU."""
    fits: bool
    tokens_per_s_per_gpu: float
    mfu: float
    """Against the datasheet peak, as the trainer's log reports it."""
    run_s: float
    run_usd: float
    bound: str
    """compute-bound where what communication adds to the compute is at most LINK_SHARE_TARGET of the step, else
    bound by the link whose time, were it free, the step would lose the most of."""


def _gather_factor(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


def estimate(model: ModelShape, work: Workload, cluster: Cluster, layout: Layout,
             calibration: Calibration = CALIBRATION) -> Estimate:
    """One layout's step time, memory and cost (see the module docstring for the traffic it counts)."""
    g, nodes, world = cluster.gpus_per_node, cluster.nodes, cluster.world
    hybrid = layout.sharding == "hybrid" and nodes > 1
    shard = g if hybrid else world
    m = work.grad_accum
    weight_layers, weight_root = 2 * model.layer_params, 2 * model.root_params  # bf16
    grad = REDUCE_DTYPES[layout.reduce_dtype] * model.trained_params(work.lora_rank)
    # All-gathered bytes per step: layers twice per micro-batch (or once per step kept gathered), the root once per
    # step (training.step keeps it gathered until the last backward), each before the micro-batch that needs it.
    root_gathers_per_step = m if layout.root_regathered and not layout.keep_gathered else 1
    gathered = weight_layers * (1 if layout.keep_gathered else 2 * m) + weight_root * root_gathers_per_step
    # The gradient reductions move only during the last micro-batch's backward (sync is off before it), beside that
    # backward's re-gathers of the layers (none kept gathered).
    regathered = 0.0 if layout.keep_gathered else weight_layers * _gather_factor(shard)
    spread_shard = gathered * _gather_factor(shard) - regathered
    tail_shard = grad * _gather_factor(shard) + regathered
    replica_traffic = 2 * grad * _gather_factor(nodes) if hybrid else 0.0  # the all-reduce, per node
    link = calibration.link_efficiency
    intra_gbps = cluster.gpu.intra_node_gbps * link
    inter_gbps = cluster.inter_node_gbps * link if nodes > 1 else float("inf")
    if hybrid or nodes == 1:
        spread = {"intra": spread_shard, "inter": 0.0}
        tail = {"intra": tail_shard, "inter": replica_traffic}
    else:
        # One ring over all GPUs: each node's network carries what every ring edge carries.
        spread = {"intra": spread_shard, "inter": spread_shard}
        tail = {"intra": tail_shard, "inter": tail_shard}
    rate = {"intra": intra_gbps * 1e9, "inter": inter_gbps * 1e9}
    intra_bytes, inter_bytes = spread["intra"] + tail["intra"], spread["inter"] + tail["inter"]
    intra_s = intra_bytes / rate["intra"] if intra_bytes else 0.0
    inter_s = inter_bytes / rate["inter"] if inter_bytes else 0.0

    flops = model.flops_per_token(work.seq_len) * work.tokens_per_step
    compute_s = calibration.compute_seconds(cluster.gpu, work, model, shard, layout.keep_gathered)
    # The step's compute: the optimizer once, at its end; the rest per micro-batch. A micro-batch's layers take 3
    # passes (forward and two of backward), 4 with recomputation, 3.5 with selective (half the layers); the LM head 3,
    # all in the forward (the fused loss takes the head's gradients there, and recomputation leaves it alone).
    optimizer_s = min(compute_s, calibration.optimizer_seconds(cluster.gpu, model, work.lora_rank, shard))
    micro_batch_s = (compute_s - optimizer_s) / m
    passes = {"none": 3, "selective": 3.5, "full": 4}[work.activation_checkpointing]
    head_flops = 6 * model.hidden * model.vocab / model.flops_per_token(work.seq_len)
    head_s = micro_batch_s * 3 * head_flops / (3 * head_flops + passes * (1 - head_flops))
    layer_s = (micro_batch_s - head_s) / model.layers
    backward_s = (micro_batch_s - head_s) * (passes - 1) / passes  # one micro-batch's backward
    # Two phases: until the last micro-batch's backward, compute overlaps the weight gathers (kept gathered, all of
    # them in the first micro-batch's forward); in that backward, the reductions (and the layers' re-gathers). The
    # root's gather must land before the micro-batch that needs it computes, and its gradient, complete only after
    # the embedding's backward, is reduced after all compute. Where a link bounds a phase, the compute that cannot overlap its
    # transfers runs in series with them: kept gathered, the last layer's forward and the head after the last gather,
    # and the last layer's backward before the first reduction (a link that re-gathers starts that phase with the
    # last layer's gather; hybrid's cross-node all-reduce waits for the last layer's backward and reduce-scatter).
    # The optimizer follows the last reduction.
    gather_window = micro_batch_s - backward_s if layout.keep_gathered else compute_s - optimizer_s - backward_s
    after_gathers = layer_s / passes + head_s if layout.keep_gathered else 0.0
    # Before its first reduction a link waits for the last layer's backward, unless it starts on re-gathers.
    last_backward = layer_s * (passes - 1) / passes
    before_reductions = {"intra": last_backward if layout.keep_gathered else 0.0,
                         "inter": last_backward if layout.keep_gathered or hybrid else 0.0}
    root_gathered = weight_root * root_gathers_per_step * _gather_factor(shard)
    root_gather_bytes = {"intra": root_gathered, "inter": 0.0 if hybrid or nodes == 1 else root_gathered}
    root_grad = REDUCE_DTYPES[layout.reduce_dtype] * (0 if work.lora_rank else model.root_params)
    root_last = {"intra": root_grad * _gather_factor(shard),
                 "inter": 2 * root_grad * _gather_factor(nodes) if hybrid
                 else 0.0 if nodes == 1 else root_grad * _gather_factor(shard)}
    layers_tail = {k: tail[k] - root_last[k] for k in tail}
    layers_spread = {k: spread[k] - root_gather_bytes[k] for k in spread}

    def step_seconds(rate: dict[str, float]) -> float:
        # Per layer, the links work side by side (hybrid pipelines a layer's reduce-scatter with the last one's
        # all-reduce); the root's hybrid reduction is one tensor, reduce-scattered and then all-reduced.
        side_by_side = lambda traffic: max(traffic[k] / rate[k] if traffic[k] else 0.0 for k in rate)  # noqa: E731
        root_reduction_s = (sum(root_last[k] / rate[k] if root_last[k] else 0.0 for k in rate) if hybrid
                            else side_by_side(root_last))
        return (side_by_side(root_gather_bytes) + max(gather_window, side_by_side(layers_spread) + after_gathers)
                + (compute_s - optimizer_s - backward_s - gather_window)
                + max([backward_s, *(before_reductions[k] + layers_tail[k] / rate[k] for k in rate if layers_tail[k])])
                + root_reduction_s
                + optimizer_s)

    step_s = step_seconds(rate)
    exposed_s = step_s - compute_s
    # The bounding link is the one whose time, were it free, the step would lose the most of.
    saved = {k: step_s - step_seconds({**rate, k: float("inf")}) for k in rate}
    slowest = max(saved, key=saved.get)
    bound = "compute-bound" if exposed_s <= LINK_SHARE_TARGET * step_s else f"{slowest}-node link-bound"

    memory = memory_bytes(model, work, layout, shard, calibration) * calibration.allocator_overhead
    tokens_per_s = work.tokens_per_step / step_s
    run_s = step_s * work.steps
    return Estimate(
        layout=layout, work=work, flops_per_step=flops, intra_bytes=intra_bytes, inter_bytes=inter_bytes,
        compute_s=compute_s, intra_s=intra_s, inter_s=inter_s, exposed_s=exposed_s, step_s=step_s,
        memory_gib=memory / GIB, fits=memory <= usable_bytes(cluster.gpu), tokens_per_s_per_gpu=tokens_per_s,
        mfu=tokens_per_s * model.flops_per_token(work.seq_len) / (cluster.gpu.bf16_tflops * 1e12),
        run_s=run_s, run_usd=cluster.usd_per_hour * run_s / 3600, bound=bound,
    )


def memory_bytes(model: ModelShape, work: Workload, layout: Layout, shard: int, calibration: Calibration) -> float:
    """Allocated bytes per GPU at the peak of a step.

    Sharded fp32 weights and AdamW's two fp32 moments: 12 bytes per parameter over the shard group.
    Gradients: the fp32 shard after the reduce-scatter (4 bytes over the group), or, while micro-batches
    accumulate with gradient sync off, FSDP2's unsharded fp32 accumulator of every parameter (whatever
    the reduction dtype, which only sets the bytes on the links), whatever the world size; the larger
    of the two is the peak. Gathered bf16 weights: the whole
    model when kept gathered, else the root and two layers in flight. Activations: each layer's input
    with full recomputation (plus one layer being recomputed), all of them without; selective keeps all
    of them for the layers it does not checkpoint and the input of those it does (every SELECTIVE_EVERY-th,
    the last among them: plus that one being recomputed). One chunk of the fused LM head + loss.
    LoRA: the base weights are frozen bf16 (2 bytes per parameter over the group, no gradient, no
    optimizer state); the adapters take the 16 bytes of a trained parameter.
    """
    trained = model.trained_params(work.lora_rank)
    state = (12 * trained + (2 * model.params if work.lora_rank else 0)) / shard
    gradients = 4 * trained / shard
    if work.grad_accum > 1:
        gradients = max(gradients, 4 * trained)
    layer = model.layer_params / model.layers
    gathered = 2 * model.params if layout.keep_gathered else 2 * (model.root_params + 2 * layer)
    tokens = work.seq_len * work.micro_batch
    per_layer = calibration.activation_bytes * tokens * model.hidden
    layer_input = 2 * tokens * model.hidden  # bf16
    recomputed = {"none": 0, "selective": model.layers // SELECTIVE_EVERY, "full": model.layers}[work.activation_checkpointing]
    activations = (model.layers - recomputed) * per_layer + recomputed * layer_input + (per_layer if recomputed else 0)
    loss = calibration.loss_chunk_bytes * min(work.loss_chunk_tokens, tokens) * model.vocab
    return state + gradients + gathered + activations + loss


# What a GPU's memory leaves to the allocator: the CUDA context, cuBLAS workspaces and NCCL's buffers
# take about 1.5 GiB (the 24 GB L4 was emulated at a 22 GiB cap for this reason, docs/benchmarks.md).
RESERVED_OUTSIDE_ALLOCATOR = 1.5 * GIB


def usable_bytes(gpu: GpuSpec) -> float:
    return gpu.memory_gb * 1e9 - RESERVED_OUTSIDE_ALLOCATOR


def rank_layouts(model: ModelShape, work: Workload, cluster: Cluster,
                 calibration: Calibration = CALIBRATION) -> list[Estimate]:
    """Every layout, fastest first; layouts that do not fit in memory after those that do."""
    layouts = ALL_LAYOUTS if cluster.nodes > 1 else tuple(l for l in ALL_LAYOUTS if l.sharding == "full")
    estimates = [estimate(model, work, cluster, layout, calibration) for layout in layouts]
    return sorted(estimates, key=lambda e: (not e.fits, e.step_s))


# What auto may change in a run's shape without changing its batch (the trainer's options of these names).
SHAPE_OPTIONS = ("micro_batch", "activation_checkpointing")


def same_batch_shapes(work: Workload, free: tuple[str, ...] = SHAPE_OPTIONS) -> list[Workload]:
    """Every micro-batch (a divisor of the sequences per GPU per optimizer step, micro_batch x grad_accum) and
    recomputation setting, of those in `free`, at the same tokens per step: the optimisation does not change."""
    per_gpu = work.micro_batch * work.grad_accum
    micro = [mb for mb in range(1, per_gpu + 1) if per_gpu % mb == 0] if "micro_batch" in free else [work.micro_batch]
    recompute = RECOMPUTATION if "activation_checkpointing" in free else (work.activation_checkpointing,)
    return [dataclasses.replace(work, micro_batch=mb, grad_accum=per_gpu // mb, activation_checkpointing=ac)
            for mb in micro for ac in recompute]


# auto's micro-batch and recomputation only go where the memory model leaves this share of the usable memory
# free: its allocated figures were 2-3% under the two-GPU runs it was fitted on (82.1 and 16.8 GiB), and 14-16% over
# one H200's reserved at 4 x 2048 (none, selective, full; 2026-12-01-h200-one-gpu-compute-four-machines.json, machine
# C). A shape the user fixed is held to the usable memory itself.
AUTO_MEMORY_MARGIN = 0.10


def auto_fits(estimate_: "Estimate", cluster: Cluster) -> bool:
    return estimate_.memory_gib * GIB <= usable_bytes(cluster.gpu) * (1 - AUTO_MEMORY_MARGIN)


def choose(model: ModelShape, work: Workload, cluster: Cluster, keep_gathered: bool = False, reduce_dtype: str = "fp32",
           calibration: Calibration = CALIBRATION, shapes: bool | tuple[str, ...] = False,
           shardings: tuple[str, ...] = SHARDINGS) -> Estimate | None:
    """What auto trains with: the fastest layout of `shardings` that fits and, with `shapes` (True: every one of
    SHAPE_OPTIONS, or the names of those auto may change), the fastest micro-batch and recomputation at the same
    tokens per step (same_batch_shapes), within AUTO_MEMORY_MARGIN (a fixed shape's layout too, unless only the
    margin keeps it out); ties go to the smaller memory. None when nothing fits. Keeping weights gathered and the reduction dtype stay the user's settings."""
    works = same_batch_shapes(work, SHAPE_OPTIONS if shapes is True else shapes or ())
    shardings = shardings if cluster.nodes > 1 else ("full",)
    estimates = [estimate(model, w, cluster, Layout(s, keep_gathered, reduce_dtype), calibration)
                 for w in works for s in shardings]
    fitting = [e for e in estimates if auto_fits(e, cluster)]
    if not fitting and not shapes:  # a shape the user fixed is held to the usable memory itself
        fitting = [e for e in estimates if e.fits]
    return min(fitting, key=lambda e: (e.step_s, e.memory_gib)) if fitting else None


def smallest(model: ModelShape, work: Workload, cluster: Cluster, keep_gathered: bool = False,
             reduce_dtype: str = "fp32", calibration: Calibration = CALIBRATION) -> Estimate:
    """The layout and same-batch shape that needs the least memory (to say how far from fitting it is)."""
    shardings = SHARDINGS if cluster.nodes > 1 else ("full",)
    return min((estimate(model, w, cluster, Layout(s, keep_gathered, reduce_dtype), calibration)
                for w in same_batch_shapes(work) for s in shardings), key=lambda e: e.memory_gib)


RECOMPUTATION_WORDS = {"none": "no recomputation", "selective": "selective recomputation", "full": "full recomputation"}


def describe_shape(work: Workload) -> str:
    return f"micro-batch {work.micro_batch} x {work.grad_accum} accumulation, {RECOMPUTATION_WORDS[work.activation_checkpointing]}"


def _asked_shape(work: Workload, free: tuple[str, ...]) -> str:
    """The shape the options ask for, what auto may change left open."""
    if "micro_batch" in free:
        size = f"{work.micro_batch * work.grad_accum} x {work.seq_len} tokens per GPU per step, at any micro-batch,"
    else:
        size = f"{work.micro_batch} x {work.seq_len} tokens per micro-batch"
    recompute = {"none": "without recomputation", "selective": "with selective recomputation",
                 "full": "with full recomputation"}[work.activation_checkpointing]
    return f"{size} {'with any recomputation' if 'activation_checkpointing' in free else recompute}"


def fit_error(model: ModelShape, work: Workload, cluster: Cluster, shardings: tuple[str, ...], keep_gathered: bool,
              reduce_dtype: str, calibration: Calibration = CALIBRATION, free: tuple[str, ...] = ()) -> str | None:
    """None when the run's own shape, or one auto makes of it by changing what `free` names (SHAPE_OPTIONS), fits
    in one of `shardings`; else one line that names the trainer option to change (one auto may not change: the
    micro-batch, recomputation, sharding, or the GPUs) and what fits at the same batch."""
    if choose(model, work, cluster, keep_gathered, reduce_dtype, calibration, free, shardings) is not None:
        return None
    shardings = shardings if cluster.nodes > 1 else ("full",)
    need = min(estimate(model, w, cluster, Layout(s, keep_gathered, reduce_dtype), calibration).memory_gib
               for w in same_batch_shapes(work, free) for s in shardings)
    where = f"{cluster.name} ({cluster.gpu.memory_gb:g} GB per GPU)"
    best = choose(model, work, cluster, keep_gathered, reduce_dtype, calibration, shapes=True)
    if best is None:
        least = smallest(model, work, cluster, keep_gathered, reduce_dtype, calibration)
        usable = usable_bytes(cluster.gpu) / GIB
        return (f"--instance-type: {model.name} fits in no layout, micro-batch or recomputation on {where}: the smallest "
                f"needs {least.memory_gib:.1f} GiB/GPU, auto allows {usable * (1 - AUTO_MEMORY_MARGIN):.1f} "
                f"({1 - AUTO_MEMORY_MARGIN:.0%} of {usable:.1f} usable); use GPUs with more memory, more nodes, or LoRA")
    differs = [o for o in SHAPE_OPTIONS if o not in free and getattr(best.work, o) != getattr(work, o)]
    option = "--" + differs[0].replace("_", "-") if differs else "--sharding"
    layout = f"{best.layout.sharding}, " if option == "--sharding" else ""
    return (f"{option}: {_asked_shape(work, free)} needs {'at least ' if free else ''}{need:.1f} GiB/GPU on {where}"
            f"{' with ' + '/'.join(shardings) + ' sharding' if option == '--sharding' else ''}; {layout}"
            f"{describe_shape(best.work)} fits at {best.memory_gib:.1f} GiB (~{best.tokens_per_s_per_gpu:,.0f} tok/s/GPU), "
            "the same tokens per step")


def auto_line(model: ModelShape, work: Workload, cluster: Cluster, chosen: Estimate, free: tuple[str, ...],
              shardings: tuple[str, ...] = SHARDINGS, calibration: Calibration = CALIBRATION) -> str:
    """What auto picked (layout, micro-batch, recomputation) and why: the fastest that fits; with the fastest
    of what it could pick that does not fit, when there is one."""
    layout = chosen.layout
    shardings = shardings if cluster.nodes > 1 else ("full",)
    candidates = [estimate(model, w, cluster, Layout(s, layout.keep_gathered, layout.reduce_dtype), calibration)
                  for w in same_batch_shapes(work, free) for s in shardings]
    faster = [e for e in candidates if not (auto_fits(e, cluster) if free else e.fits) and e.step_s < chosen.step_s]
    usable = usable_bytes(cluster.gpu) / GIB
    line = (f"auto: {layout.name}, {describe_shape(chosen.work)}: fastest that fits on {cluster.name}, "
            f"~{chosen.step_s:.2f} s/step, {chosen.memory_gib:.1f} of {usable:.1f} GiB/GPU"
            f"{f' (auto keeps {AUTO_MEMORY_MARGIN:.0%} free)' if free else ''}")
    if faster:
        top = min(faster, key=lambda e: (e.step_s, e.memory_gib))
        line += (f"; faster but too big: {top.layout.name}, {describe_shape(top.work)} "
                 f"(~{top.step_s:.2f} s/step, {top.memory_gib:.1f} GiB/GPU)")
    return line


def link_bound_batch(model: ModelShape, work: Workload, cluster: Cluster, layout: Layout,
                     calibration: Calibration = CALIBRATION, limit: int = 4096) -> Estimate | None:
    """The smallest batch (more micro-batches per step at the same micro-batch) whose communication beyond
    the compute is at most LINK_SHARE_TARGET of the step (its estimate is compute-bound); None within `limit`
    micro-batches (the gathers of full sharding grow with every micro-batch, so its share may never fall that low)."""
    for accum in range(1, limit + 1):
        e = estimate(model, dataclasses.replace(work, grad_accum=accum), cluster, layout, calibration)
        if e.bound == "compute-bound":
            return e if e.fits else None
    return None


def batch_line(model: ModelShape, work: Workload, cluster: Cluster, chosen: Estimate,
               calibration: Calibration = CALIBRATION) -> str:
    """The smallest batch that makes the links at most 10% of the step, with its speed and cost for the
    same tokens as the configured run."""
    batch = chosen.work.tokens_per_step * cluster.world
    run_tokens = batch * work.steps
    found = link_bound_batch(model, chosen.work, cluster, chosen.layout, calibration)
    if found is None:
        return (f"batch: no batch up to 4,096 micro-batches per step brings {chosen.layout.name}'s communication "
                f"under {LINK_SHARE_TARGET:.0%} of the step")
    tokens = found.work.tokens_per_step * cluster.world
    if tokens <= batch:
        return (f"batch: {batch:,} tokens per step already keeps communication at {chosen.exposed_s / chosen.step_s:.0%} "
                f"of the step (at most {LINK_SHARE_TARGET:.0%})")
    steps = math.ceil(run_tokens / tokens)
    run_s = steps * found.step_s
    return (f"batch: the links cost {chosen.exposed_s / chosen.step_s:.0%} of the step at {batch:,} tokens; from "
            f"batch_tokens {tokens:,} ({found.work.grad_accum} micro-batches per GPU) they cost at most "
            f"{LINK_SHARE_TARGET:.0%}: ~{found.tokens_per_s_per_gpu:,.0f} tok/s/GPU, the same {run_tokens:,} tokens in "
            f"{steps} steps, ~{_duration(run_s)}, ~${cluster.usd_per_hour * run_s / 3600:,.2f} (a larger batch changes "
            "the optimisation: retune the learning rate)")


# ---------------------------------------------------------------- the trainer's layout


class LayoutError(ValueError):
    """The workers' placement cannot carry the layout; the message is one line."""


def node_layout(node_of_rank: list[str]) -> tuple[int, int]:
    """(nodes, workers per node) from each rank's node, as Ray places them.

    Hybrid sharding needs every node to hold the same number of workers, with consecutive ranks (Ray
    Train numbers them node by node); anything else is refused, never guessed.
    """
    nodes: list[str] = []
    for node in node_of_rank:
        if not nodes or nodes[-1] != node:
            if node in nodes:
                raise LayoutError(f"ranks of node {node} are not consecutive ({node_of_rank}): "
                                  "a hybrid mesh needs each node's workers numbered together")
            nodes.append(node)
    counts = [node_of_rank.count(n) for n in nodes]
    if len(set(counts)) != 1:
        raise LayoutError(f"uneven placement: {dict(zip(nodes, counts))} workers per node; hybrid sharding needs the "
                          "same number on every node (one worker per GPU, every node's GPUs)")
    return len(nodes), counts[0]


def shape_of(config) -> ModelShape:
    """A Hugging Face decoder config's shape: parameters counted on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in lm.parameters())
    layers = sum(p.numel() for p in lm.model.layers.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    linear = sum(m.in_features + m.out_features for m in lm.model.layers[0].modules() if isinstance(m, torch.nn.Linear))
    return ModelShape(getattr(config, "name_or_path", "") or "model", layer_params=layers, root_params=total - layers,
                      layers=config.num_hidden_layers, hidden=config.hidden_size, heads=config.num_attention_heads,
                      head_dim=head_dim, vocab=config.vocab_size, linear_in_out=linear)


def resolve_sharding(requested: str, model: ModelShape, work: Workload, nodes: int, gpus_per_node: int,
                     gpu: GpuSpec | None, instance_type: str | None, keep_gathered: bool,
                     reduce_dtype: str) -> tuple[str, str]:
    """(full or hybrid, why) for --sharding; auto asks the model which fits and is faster.

    One node: full (a hybrid mesh would be the same). Several nodes with a known instance type: the
    faster of the two that fits. Unknown instance type: hybrid when a node's GPUs hold the sharded
    state (it never moves more across nodes than full), else full.
    """
    if requested != "auto":
        return requested, "as set"
    if nodes == 1:
        return "full", "one node"
    if instance_type and gpu:
        cluster = cluster_of(instance_type, nodes)
        best = choose(model, work, cluster, keep_gathered, reduce_dtype)
        if best is None:
            raise LayoutError(fit_error(model, work, cluster, SHARDINGS, keep_gathered, reduce_dtype))
        return best.layout.sharding, (f"fastest that fits on {cluster.name}: ~{best.step_s:.2f} s/step, "
                                      f"{best.memory_gib:.1f} GiB/GPU, {best.bound}")
    hybrid = memory_bytes(model, work, Layout("hybrid", keep_gathered, reduce_dtype), gpus_per_node,
                          CALIBRATION) * CALIBRATION.allocator_overhead
    if gpu is None or hybrid <= usable_bytes(gpu):
        return "hybrid", "several nodes; a node's GPUs hold the sharded state"
    return "full", f"several nodes, but a node's GPUs cannot hold the sharded state ({hybrid / GIB:.1f} GiB/GPU)"


# ---------------------------------------------------------------- the report


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def summary_line(model: ModelShape, work: Workload, cluster: Cluster, chosen: Estimate) -> str:
    """One line for the synth review: what the deployment will do with its layout and shape."""
    return (f"{cluster.name}, {chosen.layout.name}, {describe_shape(chosen.work)}: {chosen.bound}, "
            f"~{chosen.tokens_per_s_per_gpu:,.0f} tok/s/GPU, {work.steps} steps in ~{_duration(chosen.run_s)}, "
            f"~${chosen.run_usd:,.2f} ({chosen.memory_gib:.1f} GiB/GPU of {cluster.gpu.memory_gb:g} GB)")


def table(model: ModelShape, work: Workload, cluster: Cluster, calibration: Calibration = CALIBRATION) -> str:
    rows = [f"{cluster.name} ({cluster.world} x {cluster.gpu.name}, {cluster.gpu.intra_node_link} "
            f"{cluster.gpu.intra_node_gbps:g} GB/s per GPU, network {cluster.inter_node_gbps:g} GB/s per node), "
            f"{model.name}, {work.micro_batch} x {work.seq_len} x {work.grad_accum} micro-batches per GPU, "
            f"{RECOMPUTATION_WORDS[work.activation_checkpointing]} ({work.tokens_per_step * cluster.world:,} tokens per step)",
            "| layout | step s | compute s | intra-node s (GB) | inter-node s (GB) | bound | tok/s/GPU | MFU | "
            "memory GiB | fits | run | run $ |",
            "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for e in rank_layouts(model, work, cluster, calibration):
        rows.append(f"| {e.layout.name} | {e.step_s:.2f} | {e.compute_s:.2f} | {e.intra_s:.2f} ({e.intra_bytes / 1e9:.1f}) | "
                    f"{e.inter_s:.2f} ({e.inter_bytes / 1e9:.1f}) | {e.bound} | {e.tokens_per_s_per_gpu:,.0f} | "
                    f"{e.mfu:.1%} | {e.memory_gib:.1f} | {'yes' if e.fits else 'NO'} | {_duration(e.run_s)} | "
                    f"{e.run_usd:,.2f} |")
    rows.append(calibration.basis(cluster.gpu, work, model, cluster.gpus_per_node))
    rows.append(f"calibration: {calibration.source}")
    return "\n".join(rows)


def auto_lines(model: ModelShape, work: Workload, cluster: Cluster, keep_gathered: bool = False,
               reduce_dtype: str = "fp32", calibration: Calibration = CALIBRATION, free: tuple[str, ...] = ()) -> list[str]:
    """What auto picks and why: the layout and, for the options `free` names (SHAPE_OPTIONS), the micro-batch and
    recomputation at the same tokens per step; what that run takes; a faster micro-batch or recomputation setting
    that the options fix, if one fits; the batch that makes the links cheap. When nothing fits, what to change."""
    chosen = choose(model, work, cluster, keep_gathered, reduce_dtype, calibration, shapes=free)
    batch = work.tokens_per_step * cluster.world
    if chosen is None:
        lines = ["auto: nothing fits: " + fit_error(model, work, cluster, SHARDINGS, keep_gathered, reduce_dtype, calibration,
                                                    free)]
        if not work.lora_rank and choose(model, work, cluster, keep_gathered, reduce_dtype, calibration, shapes=True) is None:
            lora = dataclasses.replace(work, lora_rank=LORA_RANK_SUGGESTED)
            found = choose(model, lora, cluster, keep_gathered, reduce_dtype, calibration, shapes=True)
            if found:
                lines.append(f"LoRA fits (--lora-rank {LORA_RANK_SUGGESTED}: " + summary_line(model, lora, cluster, found) + ")")
        return lines
    lines = [auto_line(model, work, cluster, chosen, free, calibration=calibration),
             "run: " + summary_line(model, chosen.work, cluster, chosen)]
    best = choose(model, work, cluster, keep_gathered, reduce_dtype, calibration, shapes=True)
    if best.step_s < 0.95 * chosen.step_s:
        lines.append(f"faster at the same {batch:,} tokens per step: {describe_shape(best.work)} "
                     f"({best.layout.name}, ~{best.tokens_per_s_per_gpu:,.0f} tok/s/GPU, {best.memory_gib:.1f} GiB/GPU)")
    lines.append(batch_line(model, chosen.work, cluster, chosen, calibration))
    return lines


def main(argv: list[str] | None = None) -> int:
    from training.config import AUTO, GPU_PROFILES, HUB_ARCHITECTURES, ConfigError, grad_accum_for

    parser = argparse.ArgumentParser(prog="python -m planning.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance-type", default="g6.12xlarge", help="an EFA GPU type of training/hardware.py")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--model", default="qwen2.5-1.5b", help=f"{', '.join(MODELS)} or a hub id of one")
    parser.add_argument("--profile", default="l4", choices=sorted(GPU_PROFILES),
                        help="the trainer's GPU profile: sequence length, batch, loss chunk, weights kept gathered or not")
    parser.add_argument("--seq-len", type=int)
    def micro_batch(value: str) -> int | str:
        return value if value == AUTO else int(value)

    parser.add_argument("--micro-batch", default=AUTO, type=micro_batch,
                        help="sequences per GPU per micro-batch, or auto (the cluster's default): the fastest split of "
                        "the batch that fits")
    parser.add_argument("--activation-checkpointing", default=AUTO, choices=RECOMPUTATION + (AUTO,),
                        help="auto (the cluster's default): the fastest that fits")
    parser.add_argument("--reduce-dtype", default="bf16", choices=tuple(REDUCE_DTYPES),
                        help="gradient reduction dtype (bf16: the cluster's default)")
    parser.add_argument("--batch-tokens", type=int, help="tokens per optimizer step over all GPUs (default: the "
                        "profile's micro-batch x accumulation on every GPU; the cluster's training.batch_tokens)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank (0: full fine-tuning)")
    args = parser.parse_args(argv)
    spec = INSTANCE_TYPES.get(args.instance_type)
    if spec is None or spec.gpu is None:
        known = ", ".join(sorted(n for n, s in INSTANCE_TYPES.items() if s.gpu))
        print(f"error: --instance-type: {args.instance_type!r} is not a GPU type of the table ({known})", file=sys.stderr)
        return 2
    model = MODELS.get(HUB_ARCHITECTURES.get(args.model, args.model))
    if model is None:
        print(f"error: --model: {args.model!r} has no known shape ({', '.join(MODELS)})", file=sys.stderr)
        return 2
    if args.nodes < 1 or args.steps < 1 or args.lora_rank < 0:
        print("error: --nodes and --steps must be at least 1, --lora-rank at least 0", file=sys.stderr)
        return 2
    profile = GPU_PROFILES[args.profile]
    cluster = cluster_of(args.instance_type, args.nodes)
    seq_len = args.seq_len or profile["seq_len"]
    free = tuple(o for o in SHAPE_OPTIONS if getattr(args, o) == AUTO)
    micro = args.micro_batch if args.micro_batch != AUTO else None
    batch = args.batch_tokens or seq_len * (micro or profile["micro_batch"]) * profile.get("grad_accum", 1) * cluster.world
    try:
        accum = grad_accum_for(batch, cluster.world, micro or 1, seq_len)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # auto splits each GPU's sequences per step: asked for as one micro-batch of all of them.
    work = Workload(seq_len=seq_len, micro_batch=micro or accum, grad_accum=accum if micro else 1,
                    activation_checkpointing=profile["activation_checkpointing"] if "activation_checkpointing" in free
                    else args.activation_checkpointing,
                    loss_chunk_tokens=profile["loss_chunk_tokens"], steps=args.steps, lora_rank=args.lora_rank)
    keep_gathered = profile.get("reshard_after_forward", True) is False
    chosen = choose(model, work, cluster, keep_gathered, args.reduce_dtype, shapes=free)
    print(table(model, chosen.work if chosen else work, cluster))
    print("\n".join(auto_lines(model, work, cluster, keep_gathered, args.reduce_dtype, free=free)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
