"""GPU benchmark of the trainer: `python -m training.bench --help`.

Runs the trainer's own model build (build_model), FSDP2 wiring and training step (train_step)
under torchrun on the GPUs of one machine, without Ray, on Qwen2.5-1.5B with random init and
random tokens. Next to it, a baseline with the AWS example's recipe (FSDP1 with a size-based
wrap policy at 1e7 parameters, weights and AdamW in bf16, Hugging Face's own loss) at its own
shape and at ours. It measures the GPU's bf16 matmul rate in the same run, so MFU is reported
against that measured peak and against the datasheet's.

Each group of cases is one torchrun (one NCCL environment: the normal path, or sockets only);
every case builds its model afresh in that process group and reports rank 0's timing. Results
land in OUT/results.json and OUT/table.md; NCCL logs in OUT/nccl/, with a transport verdict
per group.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from training.config import BUILTIN_MODELS, GPU_PROFILES, TrainConfig, validate
from training.fp8 import FP8_MIN_CAPABILITY
from training.metrics import rates

# The example's recipe: FSDP1, size_based_auto_wrap_policy(min_num_params=1e7), bf16 everywhere.
EXAMPLE_WRAP_MIN_PARAMS = int(1e7)
EXAMPLE_SHAPE = {"micro_batch": 1, "seq_len": 128}
# Sockets only: the analogue of the example's EFA-vs-TCP comparison on one machine.
SOCKETS_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
# L4 (24 GB) as the CUDA caching allocator may use it, with headroom for the CUDA context.
L4_MEMORY_CAP_GIB = 22.0
DEFAULT_PROFILE = "h200"
BENCH_MODEL = "qwen2.5-1.5b"
# LoRA against full fine-tuning (--suite lora): both model sizes, one adapter rank.
LORA_MODELS = ("qwen2.5-1.5b", "qwen2.5-7b")
LORA_RANK = 16
# peft (and its two missing dependencies) and liger-kernel as wheels (`make bench-wheels`), for a GPU
# machine without them: installed into OUT/site-packages, never into its environment.
WHEELS = Path(__file__).resolve().parent.parent / ".whl"
# The peer recipe of --suite mfu: what a user of TRL or accelerate writes for the same job (FSDP2 over
# Hugging Face's model, Liger's Triton kernels for RoPE, RMSNorm, SwiGLU and the fused linear loss,
# no torch.compile, fused AdamW, gradient clipping at 1.0).
PEER_MODULE = "liger_kernel"


@dataclass
class Case:
    """One configuration to time: the trainer (recipe 'trainer') or the example's recipe."""

    name: str
    recipe: str = "trainer"
    profile: str = DEFAULT_PROFILE
    overrides: dict = field(default_factory=dict)
    memory_cap_gib: float | None = None
    legacy_bf16_accumulation: bool = False
    """Before the fix: a bf16 reduction also summed the micro-batch gradients in bf16 (comparison only)."""
    evaluate_batches: int = 0
    """After the timed steps, the loss on this many held-out micro-batches per GPU (pattern data)."""
    model: str | None = None
    """A built-in config other than the run's --model."""
    levers: tuple[str, ...] = ()
    """Benchmark-only changes to the trainer (LEVERS), to measure before one becomes the trainer's."""

    def train_config(self, model: str) -> TrainConfig:
        settings = {"data": "random", **GPU_PROFILES[self.profile], **self.overrides}
        return validate(TrainConfig(model=model, profile=self.profile, **settings))


@dataclass
class Group:
    """Cases that share one torchrun: a world size and an NCCL environment."""

    name: str
    world_size: int
    cases: list[Case]
    env: dict = field(default_factory=dict)
    measure_matmul: bool = False
    gpus_per_node: int | None = None
    """GPUs of one emulated node (None: all of the group's GPUs are one node); meshes follow it."""
    measure_links: bool = False
    """Time all-gather, reduce-scatter and all-reduce at the model's message sizes, in this NCCL environment."""

    @property
    def emulated_nodes(self) -> int:
        return self.world_size // (self.gpus_per_node or self.world_size)


PEER = Case("peer: FSDP2 + Liger kernels, no compile", recipe="liger")
FP8_CUBE = "fp8 8192x8192x8192"
FP8_PEER = Case("peer FP8: torchao float8 on Hugging Face's model, FSDP2, compiled layers, Liger loss", recipe="fp8-peer")
# --suite parity: steps of the loss-parity runs (pattern data, same seed), and the validation micro-batches per GPU.
PARITY_STEPS = 300
PARITY_EVAL_BATCHES = 16


def plan(suite: str, gpus: int) -> list[Group]:
    """The groups of a suite on a machine with `gpus` GPUs."""
    default = Case(f"trainer, {DEFAULT_PROFILE} profile (default)")
    ours = {k: GPU_PROFILES[DEFAULT_PROFILE][k] for k in ("micro_batch", "seq_len")}
    example = [
        Case("example recipe at its shape", recipe="example", overrides=dict(EXAMPLE_SHAPE)),
        Case("example recipe at our shape", recipe="example", overrides=dict(ours)),
        Case("example recipe at our sequence length", recipe="example", overrides={"micro_batch": 1, "seq_len": ours["seq_len"]}),
    ]
    l4 = Case(f"trainer, l4 profile, memory capped at {L4_MEMORY_CAP_GIB:g} GiB", profile="l4",
              memory_cap_gib=L4_MEMORY_CAP_GIB)
    # The L4 profile at world size 2, the least sharding; on a larger machine at all GPUs too.
    l4_worlds = [2, gpus] if gpus > 2 else [min(gpus, 2)]
    if suite == "smoke":
        return [Group("main", gpus, [default, example[0]], measure_matmul=True)]
    if suite == "l4":
        # The L4 profile and its communication lever, on the normal path and on sockets (a slow network).
        kept = dataclasses.replace(l4, name=f"{l4.name}, weights gathered through accumulation",
                                   overrides={"reshard_after_forward": False})
        sockets = [dataclasses.replace(c, name=f"{c.name}, NCCL sockets only") for c in (l4, kept)]
        return [group for world in l4_worlds for group in (
            Group(f"l4-world{world}", world, [l4, kept], measure_matmul=world == l4_worlds[0]),
            Group(f"l4-world{world}-sockets", world, sockets, env=dict(SOCKETS_ENV)))]
    if suite == "layouts":
        return layout_groups() if gpus >= 2 else []
    if suite == "accumulation":
        return accumulation_groups() if gpus >= 2 else accumulation_groups()[-1:]
    if suite == "lora":
        return lora_groups(gpus)
    variants = [
        Case("trainer, no torch.compile", overrides={"compile": False}),
        Case("trainer, micro-batch 4", overrides={"micro_batch": 4}),
        Case("trainer, micro-batch 12", overrides={"micro_batch": 12}),
        Case("trainer, reshard weights after forward (re-gather in backward)", overrides={"reshard_after_forward": True}),
        Case("trainer, loss chunk 4096 tokens", overrides={"loss_chunk_tokens": 4096}),
        Case("trainer, activation checkpointing", overrides={"activation_checkpointing": True}),
    ]
    if suite == "variants":
        return [Group("main", gpus, [default, *variants, *example], measure_matmul=True)]
    if suite == "mfu":
        return mfu_groups(default, gpus)
    if suite == "fp8":
        return fp8_groups(default, gpus)
    if suite == "parity":
        return parity_groups(gpus)
    groups = [Group("main", gpus, [default, *example], measure_matmul=True), Group("peer", gpus, [PEER])]
    groups += [Group(f"l4-world{world}", world, [l4]) for world in l4_worlds]
    groups.append(Group("sockets", gpus, [Case(f"{default.name}, NCCL sockets only")], env=dict(SOCKETS_ENV)))
    if gpus > 1:
        groups.append(Group("world1", 1, [Case(f"{default.name}, one GPU")]))
    return groups


# --suite mfu: the levers on the h200 profile's step, each alone and the promising ones together,
# next to the peer recipe in the same run. A lever is entered around the case's model build and steps.


@contextlib.contextmanager
def _cudnn_attention():
    """SDPA tries cuDNN's attention first (Hopper kernels), then flash, efficient, math."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(order, set_priority=True):
        yield


def _repeat_kv():
    """Hugging Face's SDPA call expands the 2 key/value heads to 12 instead of passing enable_gqa
    (a backend without grouped-query support then still qualifies)."""
    from transformers.integrations import sdpa_attention

    return mock.patch.object(sdpa_attention, "use_gqa_in_sdpa", lambda *args, **kwargs: False)


@contextlib.contextmanager
def _coordinate_descent():
    """Inductor tunes the launch configuration of its generated (norm, SwiGLU, loss) kernels."""
    import torch._inductor.config as inductor

    with inductor.patch(coordinate_descent_tuning=True):
        yield


@contextlib.contextmanager
def _fp8_recipe(make):
    """training.fp8's float8 config replaced by make() (convert_to_fp8 reads it when it converts)."""
    from training import fp8

    with mock.patch.object(fp8, "float8_config", lambda all_gather_in_float8=True, emulate=False: make()):
        yield


def _fp8_rowwise():
    """torchao's rowwise recipe (one scale per row, CUTLASS's rowwise GEMM; weights gathered in bf16)."""
    from torchao.float8 import Float8LinearConfig

    return _fp8_recipe(lambda: Float8LinearConfig.from_recipe_name("rowwise"))


def _fp8_bf16_all_gather():
    """Tensorwise float8 with the weights all-gathered in bf16 and cast after the gather."""
    from torchao.float8 import Float8LinearConfig

    return _fp8_recipe(lambda: Float8LinearConfig(enable_fsdp_float8_all_gather=False))


@contextlib.contextmanager
def _liger_kernels():
    """Liger's RoPE, RMSNorm and SwiGLU modules in place of Hugging Face's, inside the trainer's compiled
    layers (its own fused loss stays)."""
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2
    from transformers.models.qwen2 import modeling_qwen2

    # Set to what they are now, so that leaving restores them over Liger's replacements.
    names = ("Qwen2RMSNorm", "Qwen2MLP", "apply_rotary_pos_emb")
    with mock.patch.multiple(modeling_qwen2, **{name: getattr(modeling_qwen2, name) for name in names}):
        apply_liger_kernel_to_qwen2(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)
        yield


def _host_guard():
    """The step's finiteness guard as it was: the host waits for the loss and the norm, then launches
    the update (training.step.train_step now launches a fused optimizer first, told to skip on the device)."""
    import training.step

    return mock.patch.object(training.step, "skips_on_device", lambda optimizer: False)


def _copied_accumulation():
    """The fused loss's head-gradient sum as it was: each chunk's fp32 product into a new tensor, copied
    into the accumulator (now added in place)."""
    import torch

    import training.loss

    return mock.patch.object(training.loss, "_add_outer_fp32", lambda accumulator, grad_logits, chunk: accumulator.copy_(
        torch.addmm(accumulator, grad_logits.t(), chunk, out_dtype=torch.float32)))


def _read_after_update():
    """The step's numbers read as they were: after the update is launched, so the host waits for the whole
    step, update included, and every step starts on an idle GPU (now only their own copy is waited for)."""
    import training.step

    return mock.patch.object(training.step, "on_host", lambda values: values.tolist)


def _transformers_masks():
    """The attention masks as transformers builds them inside the model: it checks the positions for packed
    documents by reading them back to the host, a sync in every forward (training.model.attention_masks)."""
    import torch
    from transformers.masking_utils import create_causal_mask

    import training.model

    def masks(config, embeds, position_ids):
        positions = torch.arange(embeds.shape[1], device=embeds.device)[None] if position_ids is None else position_ids
        return {"full_attention": create_causal_mask(config=config, inputs_embeds=embeds, attention_mask=None,
                                                     past_key_values=None, position_ids=positions)}

    return mock.patch.object(training.model, "attention_masks", masks)


@contextlib.contextmanager
def _no_automatic_gc():
    """Python's collector kept from running inside the steps: what exists is frozen out of its scans and the
    automatic passes are off (a full pass over a heap of modules and hooks, at a random step)."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


def _fsdp_units_after_apply(configure):
    """training.model.apply_fsdp, then configure(unit) on each FSDP unit it made (a communication setting)."""
    from torch.distributed.fsdp import FSDPModule

    import training.model

    apply = training.model.apply_fsdp

    def apply_then_configure(model, *args, **kwargs):
        apply(model, *args, **kwargs)
        for unit in model.modules():
            if isinstance(unit, FSDPModule):
                configure(unit)

    return mock.patch.object(training.model, "apply_fsdp", apply_then_configure)


def _symmetric_memory():
    """FSDP2 all-gathers from NCCL symmetric memory (torchtitan's fsdp symmetric-memory option: sum-only
    reductions, then set_symm_mem_for_comm). Under NCCL_CTA_POLICY=2 (zero CTAs) NCCL copies with the copy
    engines on one node: the gathers take no SM from the overlapped matmuls (PyTorch's docs, "Copy Engine
    Collectives")."""
    import torch
    from torch.distributed.fsdp import FSDPModule

    if not hasattr(FSDPModule, "set_symm_mem_for_comm"):  # the device image's torch 2.11 lacks it; 2.13 has it
        raise RuntimeError(f"symmetric-memory: torch {torch.__version__} has no FSDPModule.set_symm_mem_for_comm")

    def configure(unit):
        unit.set_force_sum_reduction_for_comms(True)
        unit.set_symm_mem_for_comm()

    return _fsdp_units_after_apply(configure)


def _process_group_memory():
    """FSDP2's staging buffers come from NCCL's allocator and reductions are sums: NCCL can then register them
    and transfer without its own copies (set_allocate_memory_from_process_group_for_comm's docs)."""
    def configure(unit):
        unit.set_force_sum_reduction_for_comms(True)
        unit.set_allocate_memory_from_process_group_for_comm(True)

    return _fsdp_units_after_apply(configure)


# Levers that are process settings: each runs the default case in its own torchrun.
# NCCL_CTA_POLICY=1 (NCCL 2.27+, "efficiency"): NCCL uses as few CTAs as keep its speed, leaving SMs to the
# overlapped compute (NCCL's docs, "NCCL Communicator CTA Policy Flags").
MFU_ENV_GROUPS = {"expandable-segments": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                  "nccl-max-8-ctas": {"NCCL_MAX_CTAS": "8"}, "nccl-cta-efficiency": {"NCCL_CTA_POLICY": "1"},
                  "copy-engine-all-gather": {"NCCL_CTA_POLICY": "2"}}
# The levers an env group's case enters (the copy engines gather only from symmetric memory).
MFU_ENV_LEVERS = {"copy-engine-all-gather": ("symmetric-memory",)}
LEVERS = {"fp8-rowwise": _fp8_rowwise, "fp8-bf16-all-gather": _fp8_bf16_all_gather,
          "cudnn-attention": _cudnn_attention, "repeat-kv": _repeat_kv,
          "coordinate-descent": _coordinate_descent, "liger-kernels": _liger_kernels,
          "host-guard": _host_guard, "copied-accumulation": _copied_accumulation,
          "read-after-update": _read_after_update, "transformers-masks": _transformers_masks,
          "no-automatic-gc": _no_automatic_gc, "symmetric-memory": _symmetric_memory,
          "process-group-memory": _process_group_memory}


def attention_backend(device, cfg: TrainConfig) -> str:
    """The SDPA backend the dispatcher picks for this model's attention call (causal, grouped-query as
    Hugging Face passes it unless repeat-kv is entered), under the levers entered now."""
    import torch
    from torch.nn.attention import SDPBackend
    from transformers.integrations import sdpa_attention

    from training.model import model_config

    config = model_config(cfg)
    head = config.hidden_size // config.num_attention_heads
    gqa = sdpa_attention.use_gqa_in_sdpa(None, torch.empty(1, head), torch.empty(1, head))
    kv_heads = config.num_key_value_heads if gqa else config.num_attention_heads
    q = torch.empty(cfg.micro_batch, config.num_attention_heads, cfg.seq_len, head, device=device, dtype=torch.bfloat16,
                    requires_grad=True)
    kv = torch.empty(cfg.micro_batch, kv_heads, cfg.seq_len, head, device=device, dtype=torch.bfloat16, requires_grad=True)
    choice = torch._fused_sdp_choice(q, kv, kv, None, 0.0, True, scale=None, enable_gqa=gqa)
    return f"{SDPBackend(choice).name}{' (enable_gqa)' if gqa else ' (key/value heads repeated)'}"


def mfu_groups(default: Case, gpus: int) -> list[Group]:
    """The h200 step's levers (issue: 75% MFU at world size 2), the peer recipe, and two NCCL/allocator settings."""
    def lever(*names: str, **overrides) -> Case:
        label = " + ".join([*names, *(f"{k} {v}" for k, v in overrides.items())])
        return Case(f"trainer, {label}", levers=names, overrides=overrides)

    # The trainer's changes, each undone alone (the default has them all), and the levers tried that did not pay.
    # bf16 on the wire: with one micro-batch per step FSDP2 reduce-scatters the bf16 gradients natively.
    kept = [default, lever("read-after-update", "transformers-masks"), lever("read-after-update"),
            lever("transformers-masks"), lever("host-guard"), lever("copied-accumulation"),
            lever("host-guard", "copied-accumulation"), lever(reduce_dtype="bf16")]
    tried = [lever("cudnn-attention"), lever("cudnn-attention", "repeat-kv"), lever("coordinate-descent"),
             lever("liger-kernels"), lever(loss_chunk_tokens=16384),
             lever("cudnn-attention", "coordinate-descent"), lever("no-automatic-gc"), lever("symmetric-memory"),
             lever("process-group-memory")]
    envs = [Group(name, gpus, [dataclasses.replace(default, name=f"trainer, {name}", levers=MFU_ENV_LEVERS.get(name, ()))],
                  env=env) for name, env in MFU_ENV_GROUPS.items()]
    # The l4 profile's 4 micro-batches a step: a sync in each forward idled the GPU four times a step.
    l4 = [Case("trainer, l4 profile", profile="l4"),
          Case("trainer, l4 profile, read-after-update + transformers-masks", profile="l4",
               levers=("read-after-update", "transformers-masks")),
          Case("trainer, l4 profile, no-automatic-gc", profile="l4", levers=("no-automatic-gc",))]
    return [Group("main", gpus, kept, measure_matmul=True), Group("l4-step", gpus, l4),
            Group("peer", gpus, [PEER]), Group("tried", gpus, [default, *tried]), *envs]


def fp8_groups(default: Case, gpus: int) -> list[Group]:
    """Issue 35: the h200 step in bf16 and in float8 (tensorwise with and without float8 all-gather, rowwise),
    beside the bf16 peer and an FP8 peer recipe, in one run; the matmul rates give the bf16 and FP8 peaks."""
    fp8 = {"precision": "fp8"}
    cases = [default, Case("trainer, fp8 tensorwise, float8 all-gather", overrides=fp8),
             Case("trainer, fp8 tensorwise, bf16 all-gather", overrides=fp8, levers=("fp8-bf16-all-gather",)),
             Case("trainer, fp8 rowwise", overrides=fp8, levers=("fp8-rowwise",))]
    return [Group("main", gpus, cases, measure_matmul=True), Group("peer", gpus, [PEER, FP8_PEER])]


def parity_groups(gpus: int) -> list[Group]:
    """Issue 35's loss parity: bf16, bf16 again (the noise floor) and fp8 on pattern data at the h200 profile,
    PARITY_STEPS steps each from the same seed, then the validation loss."""
    settings = {"data": "pattern", "steps": PARITY_STEPS, "warmup_steps": 10}
    return [Group("parity", gpus, [
        Case(name, overrides=settings | extra, evaluate_batches=PARITY_EVAL_BATCHES)
        for name, extra in (("parity: bf16", {}), ("parity: bf16, repeated", {}),
                            ("parity: fp8 tensorwise", {"precision": "fp8"}))])]


def lora_groups(gpus: int) -> list[Group]:
    """LoRA (rank 16, all-linear) against full fine-tuning, Qwen2.5-1.5B and 7B shapes: speed at the h200
    profile (7B with activation checkpointing: 8 x 4096 tokens of its activations do not fit), and
    what fits an L4 at the l4 profile under the 22 GiB cap."""
    def kind(rank: int) -> str:
        return f"LoRA rank {rank}" if rank else "full fine-tuning"

    speed, l4 = [], []
    for model in LORA_MODELS:
        shape = {} if model == BENCH_MODEL else {"activation_checkpointing": True}
        for rank in (0, LORA_RANK):
            speed.append(Case(f"{model}, {kind(rank)}, {DEFAULT_PROFILE} profile" + (", recomputation" if shape else ""),
                              model=model, overrides={**shape, "lora_rank": rank}))
            l4.append(Case(f"{model}, {kind(rank)}, l4 profile, memory capped at {L4_MEMORY_CAP_GIB:g} GiB", profile="l4",
                           model=model, overrides={"lora_rank": rank}, memory_cap_gib=L4_MEMORY_CAP_GIB))
    return [Group("lora-speed", gpus, speed, measure_matmul=True), Group("lora-l4", gpus, l4)]


# The layouts on the target's link: world size 2 as "two nodes of one GPU" (DESIGN: NCCL with P2P and
# SHM off talks over sockets at about the g6's 40 Gbit/s). A hybrid mesh there is 2 x 1: replication,
# one gradient all-reduce per step; it calibrates the link and compute terms of training.plan, which
# carries hybrid's in-node advantage at 2 x 4.
LAYOUT_CASES = [
    ("l4", {}), ("l4", {"reshard_after_forward": False}), ("l4", {"sharding": "hybrid"}),
    ("l4", {"sharding": "hybrid", "reduce_dtype": "bf16"}),
    ("h200", {"reshard_after_forward": True}), ("h200", {}), ("h200", {"sharding": "hybrid"}),
]


def layout_name(profile: str, overrides: dict) -> str:
    from training.plan import Layout

    layout = Layout(overrides.get("sharding", "full"), not overrides.get(
        "reshard_after_forward", GPU_PROFILES[profile].get("reshard_after_forward", True)), overrides.get("reduce_dtype", "fp32"))
    return f"{profile} shape, {layout.name}"


def layout_groups() -> list[Group]:
    cases = [Case(layout_name(p, o), profile=p, overrides={"sharding": "full", **o}) for p, o in LAYOUT_CASES]
    loss_cases = [Case(f"l4 shape, hybrid, {dtype} reduction, pattern data", profile="l4",
                       overrides={"sharding": "hybrid", "reduce_dtype": dtype, "data": "pattern", "lr": 3e-4,
                                  "warmup_steps": 5, "steps": 60}) for dtype in ("fp32", "bf16")]
    return [
        Group("layouts-nvlink", 2, cases, gpus_per_node=1, measure_links=True, measure_matmul=True),
        Group("layouts-sockets", 2, [dataclasses.replace(c, name=c.name + ", sockets") for c in cases],
              env=dict(SOCKETS_ENV), gpus_per_node=1, measure_links=True),
        Group("reduce-dtype-loss", 2, loss_cases, gpus_per_node=1),
    ]


# Gradient accumulation precision (fine-tuning correctness issue, S4): fp32 reduction, bf16 on the wire
# with fp32 accumulation (the trainer now), and bf16 accumulation (before), at 4 and 16 micro-batches,
# 300 steps of learnable data from the same seed; then their speed on the emulated 40 Gbit/s link.
ACCUMULATION_VARIANTS = (("fp32", False), ("bf16", False), ("bf16", True))
# Layouts of the speed cases: hybrid (one cross-node all-reduce per step) and full sharding with the
# weights kept gathered through the micro-batches (one gather per step); plain full gathers twice per
# micro-batch, 16 x 3 GB at 16 micro-batches, minutes per step on the emulated link.
ACCUMULATION_LAYOUTS = {"hybrid": {"sharding": "hybrid"}, "full+gathered": {"sharding": "full", "reshard_after_forward": False}}


def accumulation_name(dtype: str, legacy: bool, grad_accum: int) -> str:
    accumulate = "bf16" if legacy else "fp32"
    return f"hybrid, {dtype} on the wire, {accumulate} accumulation, grad_accum {grad_accum}"


def accumulation_groups() -> list[Group]:
    loss = [Case(accumulation_name(dtype, legacy, accum) + ", pattern data", profile="l4", legacy_bf16_accumulation=legacy,
                 evaluate_batches=8,
                 overrides={"sharding": "hybrid", "reduce_dtype": dtype, "data": "pattern", "lr": 3e-4, "warmup_steps": 20,
                            "steps": 300, "seq_len": 512, "micro_batch": 1, "grad_accum": accum,
                            "activation_checkpointing": False, "compile": False})
            for accum in (4, 16) for dtype, legacy in ACCUMULATION_VARIANTS]
    # The speed of each layout's reduction at 4 and 16 micro-batches (bf16 accumulation sends the same
    # bytes as bf16 on the wire); over NVLink too, which gives the same cases' compute time.
    speed = [Case(f"{layout}, {dtype} on the wire, grad_accum {accum}", profile="l4",
                  overrides={**ACCUMULATION_LAYOUTS[layout], "reduce_dtype": dtype, "grad_accum": accum})
             for layout in ACCUMULATION_LAYOUTS for accum in (4, 16) for dtype in ("fp32", "bf16")]
    return [Group("accumulation-loss", 2, loss, gpus_per_node=1),
            Group("accumulation-nvlink", 2, [dataclasses.replace(c, name=f"{c.name}, NVLink") for c in speed],
                  gpus_per_node=1, measure_links=True),
            Group("accumulation-sockets", 2, [dataclasses.replace(c, name=f"{c.name}, sockets") for c in speed],
                  env=dict(SOCKETS_ENV), gpus_per_node=1, measure_links=True),
            # One emulated node alone: the per-step and per-micro-batch compute of the 2 x 1 layouts (the
            # shard group of hybrid is this one GPU), without any link.
            # And the cluster's auto shape (4 x 2048, one micro-batch) at each recomputation setting: speed and
            # the activation memory the planner counts for it.
            Group("accumulation-one-gpu", 1, [Case(f"one GPU, grad_accum {accum}", profile="l4",
                                                   overrides={"grad_accum": accum}) for accum in (1, 4, 16)]
                  + [Case(f"one GPU, 4 x 2048, {ac} recomputation", profile="l4",
                          overrides={"micro_batch": 4, "grad_accum": 1, "activation_checkpointing": ac})
                     for ac in ("none", "selective", "full")], measure_matmul=True)]


# ---------------------------------------------------------------- the worker (one per GPU)


def worker(group_file: str, out: str, model_name: str, warmup: int, steps: int) -> None:
    import torch
    import torch.distributed as dist

    spec = json.loads(Path(group_file).read_text())
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    results_dir = Path(out) / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    if spec["measure_matmul"] and cuda:
        shapes = matmul_rates(device)
        gathered: list = [None] * world
        dist.all_gather_object(gathered, shapes)
        if rank == 0:
            (results_dir / "matmul.json").write_text(json.dumps({"per_rank": gathered, "device": torch.cuda.get_device_name(device)}, indent=1))
    if spec.get("measure_links") and cuda:
        links = link_bandwidth(device, model_name)
        if rank == 0:
            (results_dir / f"links-{spec['name']}.json").write_text(json.dumps(links, indent=1))
    bases: dict[str, dict] = {}  # one random init per model, kept while its cases run
    for raw in spec["cases"]:
        case = Case(**raw)
        cfg = case.train_config(case.model or model_name)
        full_state = None
        if case.recipe == "trainer":
            from training.model import full_state_dict_on_rank0, model_config, with_adapters

            if cfg.model not in bases:
                bases = {cfg.model: full_state_dict_on_rank0(dataclasses.replace(cfg, lora_rank=0), model_config(cfg))
                         if rank == 0 else {}}
            full_state = bases[cfg.model]
            if cfg.lora_rank and rank == 0:
                full_state = with_adapters(full_state, cfg, model_config(cfg))
        result = run_case(case, cfg, device, rank, world, full_state, warmup, steps, spec.get("gpus_per_node"))
        result |= {"group": spec["name"], "world_size": world, "env": spec["env"]}
        if rank == 0:
            print(json.dumps(result), flush=True)
            slug = "".join(c if c.isalnum() else "-" for c in f"{spec['name']}-{case.name}")
            (results_dir / f"{slug}.json").write_text(json.dumps(result, indent=1))
    dist.destroy_process_group()


def run_case(case: Case, cfg: TrainConfig, device, rank: int, world: int, full_state, warmup: int, steps: int,
             gpus_per_node: int | None = None) -> dict:
    import torch

    from training.metrics import model_flops_per_token, peak_memory_gib

    result = {"name": case.name, "recipe": case.recipe, "levers": list(case.levers), "settings": dataclasses.asdict(cfg),
              "memory_cap_gib": case.memory_cap_gib, "tokens_per_step_per_gpu": cfg.tokens_per_step_per_worker}
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(
            min(1.0, case.memory_cap_gib * 2**30 / torch.cuda.get_device_properties(device).total_memory)
            if case.memory_cap_gib else 1.0, device)
        torch.cuda.reset_peak_memory_stats(device)
        result["device"] = torch.cuda.get_device_name(device)
    if case.recipe != "trainer" and device.type != "cuda":
        return result | {"error": "FSDP1 needs a GPU" if case.recipe == "example" else "Liger's kernels need a GPU"}
    if device.type == "cuda":
        torch._dynamo.reset()  # each case compiles afresh: no recompile limit reached, no graph of another lever
    model = optimizer = step = None
    try:
        with contextlib.ExitStack() as levers:
            for name in case.levers:
                levers.enter_context(LEVERS[name]())
            if device.type == "cuda":
                try:
                    result["attention_backend"] = attention_backend(device, cfg)
                except Exception as error:  # a probe, not the measurement
                    result["attention_backend"] = f"unknown ({type(error).__name__}: {error})"[:200]
            if case.recipe == "trainer":
                model, optimizer, step = _trainer_step(cfg, device, rank, world, full_state, gpus_per_node,
                                                       case.legacy_bf16_accumulation)
            elif case.recipe == "liger":
                model, optimizer, step = _peer_step(cfg, device, rank, world)
            elif case.recipe == "fp8-peer":
                model, optimizer, step = _fp8_peer_step(cfg, device, rank, world)
            else:
                model, optimizer, step = _example_step(cfg, device, rank, world)
            result["flops_per_token"] = model_flops_per_token(_meta_model(cfg), cfg.seq_len)
            timing = time_steps(step, warmup, cfg.steps if cfg.data == "pattern" else steps, device)
        result |= timing | {"peak_mem_gib": peak_memory_gib(device),
                            "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30 if device.type == "cuda" else 0.0}
        if case.evaluate_batches:
            result["val_loss"] = _validation_loss(model, cfg, device, rank, world, case.evaluate_batches)
    except torch.OutOfMemoryError as error:
        result |= {"error": "out of memory", "detail": str(error).splitlines()[0][:300],
                   "peak_mem_gib": peak_memory_gib(device)}
    except Exception as error:  # one broken variant must not cost the rest of the suite
        import traceback

        traceback.print_exc()
        result |= {"error": type(error).__name__, "detail": str(error).splitlines()[0][:300] if str(error) else ""}
    finally:
        # The step closes over the model and optimizer, and FSDP's hooks make cycles: all three go before the
        # collection, or the next case runs beside this one's weights (and counts them in its peak memory).
        del model, optimizer, step
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    return result


def _meta_model(cfg: TrainConfig):
    import torch
    from transformers import AutoModelForCausalLM

    from training.model import CausalLMWithLoss, model_config

    with torch.device("meta"):
        return CausalLMWithLoss(AutoModelForCausalLM.from_config(model_config(cfg)))


def _validation_loss(model, cfg: TrainConfig, device, rank: int, world: int, batches: int) -> float:
    """Mean loss over held-out synthetic sequences (the stream train_func validates on)."""
    import itertools

    from training.data import VALIDATION_SEED_OFFSET, synthetic_batches
    from training.step import evaluate

    held = list(itertools.islice(synthetic_batches(cfg.data, cfg.seed + VALIDATION_SEED_OFFSET, model.config.vocab_size,
                                                   cfg.seq_len, cfg.micro_batch, rank, world), batches))
    return evaluate(model, held, device)[0]


def _trainer_step(cfg: TrainConfig, device, rank: int, world: int, full_state, gpus_per_node: int | None = None,
                  legacy_bf16_accumulation: bool = False):
    """The trainer's own pieces, exactly as train_func wires them (the mesh from the emulated nodes)."""
    import training.model
    from training.data import synthetic_batches
    from training.fp8 import after_optimizer_step
    from training.model import build_model, device_mesh
    from training.schedule import lr_at
    from training.step import make_optimizer, train_step

    per_node = gpus_per_node or world
    sharding = "full" if cfg.sharding == "auto" else cfg.sharding
    mesh = device_mesh(device, sharding, world // per_node, per_node)
    policy = training.model.MixedPrecisionPolicy
    if legacy_bf16_accumulation:  # FSDP2 accumulates in the reduce dtype: make it the compute dtype
        training.model.MixedPrecisionPolicy = lambda **kw: policy(**{**kw, "reduce_dtype": kw.get("param_dtype")})
    try:
        model = build_model(cfg, device, rank, world, full_state, mesh=mesh)
    finally:
        training.model.MixedPrecisionPolicy = policy
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, device)
    batches = synthetic_batches(cfg.data, cfg.seed, model.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)

    def step(i: int):
        lr = lr_at(i, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
        return train_step(model, optimizer, batches, cfg.grad_accum, cfg.grad_clip, lr, device,
                          keep_weights_gathered=not cfg.reshard_after_forward,
                          after_update=after_optimizer_step if cfg.precision == "fp8" else None).loss

    return model, optimizer, step


def _example_step(cfg: TrainConfig, device, rank: int, world: int):
    """The example's recipe: FSDP1 over a bf16 model, size-based wrapping, bf16 AdamW, HF loss."""
    import functools

    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
    from transformers import AutoModelForCausalLM

    from training.data import synthetic_batches
    from training.model import model_config

    torch.manual_seed(cfg.seed)
    with device:
        lm = AutoModelForCausalLM.from_config(model_config(cfg), dtype=torch.bfloat16)
    model = FSDP(lm, auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=EXAMPLE_WRAP_MIN_PARAMS),
                 device_id=device if device.type == "cuda" else None, sync_module_states=world > 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    batches = synthetic_batches("random", cfg.seed, lm.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)

    def step(i: int):
        input_ids = next(batches)["input_ids"].to(device)
        loss = model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return model, optimizer, step


def _peer_step(cfg: TrainConfig, device, rank: int, world: int):
    """The peer recipe (PEER_MODULE): Hugging Face's model with Liger's kernels patched in, as TRL's
    use_liger_kernel does; FSDP2 per decoder layer and the root, bf16 compute, fp32 weights and
    reduction, weights resharded after forward (FSDP2's default); Hugging Face's mean loss."""
    import torch
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    from training.data import synthetic_batches
    from training.model import model_config

    torch.manual_seed(cfg.seed)
    with device:
        lm = AutoModelForCausalLM.from_config(model_config(cfg), dtype=torch.float32, attn_implementation="sdpa")
    apply_liger_kernel_to_qwen2(model=lm)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in lm.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(lm, mp_policy=mp)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=cfg.lr, fused=True)
    batches = synthetic_batches("random", cfg.seed, lm.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)

    def step(i: int):
        input_ids = next(batches)["input_ids"].to(device)
        loss = lm(input_ids=input_ids, labels=input_ids, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return lm, optimizer, step


def _fp8_peer_step(cfg: TrainConfig, device, rank: int, world: int):
    """An FP8 recipe as torchtitan's float8 docs and accelerate's torchao backend write it: Hugging Face's model,
    torchao's tensorwise float8 on every linear layer but the LM head (dimensions divisible by 16, torchao's
    filter), weights all-gathered in float8 and their scales precomputed after each optimizer step, each decoder
    layer compiled, FSDP2 per layer and the root, Liger's fused linear cross-entropy."""
    import torch
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training, precompute_float8_dynamic_scale_for_fsdp
    from transformers import AutoModelForCausalLM

    from training.data import synthetic_batches
    from training.model import model_config

    torch.manual_seed(cfg.seed)
    with device:
        lm = AutoModelForCausalLM.from_config(model_config(cfg), dtype=torch.float32, attn_implementation="sdpa")
    apply_liger_kernel_to_qwen2(model=lm)
    convert_to_float8_training(lm, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
                               module_filter_fn=lambda m, fqn: fqn != "lm_head" and m.in_features % 16 == 0
                               and m.out_features % 16 == 0)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in lm.model.layers:
        layer.compile()
        fully_shard(layer, mp_policy=mp)
    fully_shard(lm, mp_policy=mp)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=cfg.lr, fused=True)
    batches = synthetic_batches("random", cfg.seed, lm.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)

    def step(i: int):
        input_ids = next(batches)["input_ids"].to(device)
        loss = lm(input_ids=input_ids, labels=input_ids, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        optimizer.step()
        precompute_float8_dynamic_scale_for_fsdp(lm)
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return lm, optimizer, step


def time_steps(step, warmup: int, steps: int, device) -> dict:
    """Mean step time over `steps` after `warmup` (compilation, allocator growth), plus the spread.

    The steps run back to back, as the training loop runs them: the GPU is synchronised before the first and
    after the last only, so the next step's launch overlaps the update as it does in training. A step's time
    is then the host's, from one step's return to the next (the trainer's returns once its loss is known; a
    recipe that returns its loss on the device may run ahead, and only the mean is its step time)."""
    import torch
    import torch.distributed as dist

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    first_loss, losses = None, []
    started = time.perf_counter()
    for i in range(warmup):
        loss = step(i)
        first_loss = first_loss if first_loss is not None else float(loss)
        losses.append(float(loss))
    sync()
    warmup_s = time.perf_counter() - started
    dist.barrier()
    per_step, timed = [], []
    begin = previous = time.perf_counter()
    for i in range(warmup, warmup + steps):
        timed.append(step(i))  # a recipe returning a device tensor is read after the loop, not per step
        now = time.perf_counter()
        per_step.append(now - previous)
        previous = now
    sync()
    total = time.perf_counter() - begin
    losses += [float(loss) for loss in timed]
    final_loss = losses[-1]
    if final_loss != final_loss:
        raise RuntimeError("the loss is NaN")
    return {"warmup_s": warmup_s, "steps_timed": steps, "step_time_s": total / steps,
            "step_time_min_s": min(per_step), "step_time_max_s": max(per_step),
            "step_time_median_s": statistics.median(per_step), "first_loss": first_loss, "final_loss": final_loss,
            "losses": losses}


def link_bandwidth(device, model_name: str, repeats: int = 5) -> dict:
    """NCCL bus bandwidth (GB/s) of the collectives FSDP2 issues for this model, at their own sizes:
    one decoder layer and the root, bf16 gathers and fp32 reductions (NCCL's busbw convention)."""
    import torch
    import torch.distributed as dist

    from training.plan import MODELS

    shape, world = MODELS[model_name], dist.get_world_size()
    layer = shape.layer_params // shape.layers
    sizes = {"layer": layer, "root": shape.root_params}
    factor = {"all_gather": (world - 1) / world, "reduce_scatter": (world - 1) / world, "all_reduce": 2 * (world - 1) / world}
    results = {}
    for unit, numel in sizes.items():
        for op, dtype in (("all_gather", torch.bfloat16), ("reduce_scatter", torch.float32), ("all_reduce", torch.float32)):
            numel -= numel % world
            full = torch.ones(numel, dtype=dtype, device=device)
            part = torch.ones(numel // world, dtype=dtype, device=device)

            def once():
                if op == "all_gather":
                    dist.all_gather_into_tensor(full, part)
                elif op == "reduce_scatter":
                    dist.reduce_scatter_tensor(part, full)
                else:
                    dist.all_reduce(full)

            once()
            torch.cuda.synchronize(device)
            dist.barrier()
            started = time.perf_counter()
            for _ in range(repeats):
                once()
            torch.cuda.synchronize(device)
            seconds = (time.perf_counter() - started) / repeats
            size = numel * full.element_size()
            results[f"{op} {unit}"] = {"bytes": size, "seconds": seconds, "busbw_gbps": size * factor[op] / seconds / 1e9}
            del full, part
    torch.cuda.empty_cache()
    return results


def matmul_rates(device, repeats: int = 20) -> dict:
    """bf16 matmul TFLOP/s on random data: an 8192 cube (the peak MFU is measured against) and this model's shapes."""
    import torch

    shapes = {"8192x8192x8192": (8192, 8192, 8192), "lm_head 32768x1536x151936": (32768, 1536, 151936),
              "gate+up 32768x1536x17920": (32768, 1536, 17920), "down 32768x8960x1536": (32768, 8960, 1536),
              "qkv 32768x1536x2048": (32768, 1536, 2048)}
    rates = {}
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        rates[name] = 2 * m * k * n / statistics.median(times) / 1e12
        del a, b
    if torch.cuda.get_device_capability(device) >= FP8_MIN_CAPABILITY:
        rates[FP8_CUBE] = fp8_matmul_rate(device, 8192, repeats)
    torch.cuda.empty_cache()
    return rates


def fp8_matmul_rate(device, n: int, repeats: int) -> float:
    """e4m3 x e4m3 -> bf16 TFLOP/s of an n-cube on random data, tensorwise scales (what float8 training's GEMMs run)."""
    import torch

    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
    one = torch.ones((), device=device)
    for _ in range(3):
        torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return 2 * n**3 / statistics.median(times) / 1e12


# ---------------------------------------------------------------- the launcher and the report


def summarize(result: dict, measured_peak: float | None, datasheet_peak: float | None) -> dict:
    """Derived figures of one case: tokens/s, TFLOP/s and MFU per GPU."""
    if "error" in result:
        return {**result, "tokens_per_s_per_gpu": None}
    timing = (result["tokens_per_step_per_gpu"], result["step_time_s"], result["flops_per_token"])
    tps, tflops, mfu_measured = rates(*timing, measured_peak)
    return {**result, "tokens_per_s_per_gpu": tps, "tflops_per_gpu": tflops,
            "mfu_measured": mfu_measured, "mfu_datasheet": rates(*timing, datasheet_peak)[2]}


def format_table(rows: list[dict]) -> str:
    """Markdown table of summarized cases, in run order."""
    header = ("| configuration | GPUs | batch x seq | tokens/s/GPU | TFLOP/s/GPU | MFU (measured peak) "
              "| MFU (datasheet) | peak GiB | step ms |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    lines = [header]
    for r in rows:
        accum = r["settings"].get("grad_accum", 1)
        shape = f"{r['settings']['micro_batch']} x {r['settings']['seq_len']}" + (f" x {accum} accum" if accum > 1 else "")
        if r.get("tokens_per_s_per_gpu") is None:
            lines.append(f"| {r['name']} | {r['world_size']} | {shape} | {r.get('error', 'failed')} | | | | "
                         f"{r.get('peak_mem_gib', 0):.1f} | |")
            continue
        pct = lambda v: f"{v * 100:.1f}%" if v is not None else "n/a"  # noqa: E731
        lines.append(
            f"| {r['name']} | {r['world_size']} | {shape} | {r['tokens_per_s_per_gpu']:,.0f} | {r['tflops_per_gpu']:.1f} "
            f"| {pct(r['mfu_measured'])} | {pct(r['mfu_datasheet'])} | {r['peak_mem_gib']:.1f} | {r['step_time_s'] * 1000:.0f} |")
    return "\n".join(lines)


def comparisons(rows: list[dict]) -> list[str]:
    """Side-by-side ratios: ours over the example's recipe, normal NCCL over sockets, scaling from one GPU."""
    by_name = {r["name"]: r for r in rows if r.get("tokens_per_s_per_gpu")}
    default = next((r for r in rows if r["group"] == "main" and r["recipe"] == "trainer"), None)
    out = []
    if not default or not default.get("tokens_per_s_per_gpu"):
        return out
    base = default["tokens_per_s_per_gpu"]
    for r in rows:
        if r["recipe"] == "example" and r.get("tokens_per_s_per_gpu"):
            out.append(f"trainer default / {r['name']}: {base / r['tokens_per_s_per_gpu']:.1f}x tokens/s per GPU")
        if r["recipe"] == "liger" and r.get("tokens_per_s_per_gpu"):
            out.append(f"trainer default / {r['name']}: {base / r['tokens_per_s_per_gpu']:.3f}x tokens/s per GPU")
    out += lever_lines(default, rows)
    for r in by_name.values():
        if r["group"] == "sockets":
            out.append(f"normal NCCL path / sockets only: {base / r['tokens_per_s_per_gpu']:.2f}x tokens/s per GPU")
        if r["group"] == "world1":
            out.append(f"scaling 1 -> {default['world_size']} GPUs: {base / r['tokens_per_s_per_gpu'] * 100:.1f}% of one GPU's tokens/s per GPU")
    return out


def lever_lines(default: dict, rows: list[dict]) -> list[str]:
    """Each lever case (--suite mfu) against the default: its tokens/s ratio and how far its losses
    strayed from the default's, step by step (same seed and data: a lever must not change the loss)."""
    # A group's own baseline (same process): its first trainer case without levers; the main group's default for
    # a group of process settings (its one case is the lever) or of another recipe.
    defaults: dict[str, dict] = {}
    for r in rows:
        if (r["recipe"] == "trainer" and not r.get("levers") and r.get("tokens_per_s_per_gpu")
                and r["group"] not in MFU_ENV_GROUPS):
            defaults.setdefault(r["group"], r)
    out = []
    for r in rows:
        base = defaults.get(r["group"], default)
        if r is base or r["recipe"] != "trainer" or not r.get("tokens_per_s_per_gpu") or not (
                r.get("levers") or r["settings"] != base["settings"] or r["group"] in MFU_ENV_GROUPS):
            continue
        gap = max((abs(a - b) for a, b in zip(base.get("losses", []), r.get("losses", []))), default=float("nan"))
        out.append(f"{r['name']}: {r['tokens_per_s_per_gpu'] / base['tokens_per_s_per_gpu']:.3f}x the default's "
                   f"tokens/s ({base['group']} group), largest loss gap {gap:.4f}, attention "
                   f"{r.get('attention_backend', 'n/a')}")
    return out


ROUND = ", round "


def with_rounds(groups: list[Group], rounds: int) -> list[Group]:
    """Each group's cases run `rounds` times in turn (a, b, a, b, ...), named ", round k": a host-bound shape varies
    by more between steps and machines than a lever moves it, and a drift within the process hits every case."""
    if rounds == 1:
        return groups
    return [dataclasses.replace(g, cases=[dataclasses.replace(c, name=f"{c.name}{ROUND}{k}")
                                          for k in range(1, rounds + 1) for c in g.cases]) for g in groups]


def round_lines(rows: list[dict]) -> list[str]:
    """Per case run in rounds: the median of its rounds' tokens/s, their range, and that median over the median of
    its group's first case (the group's baseline, as in lever_lines)."""
    rounds: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if ROUND in r["name"] and r.get("tokens_per_s_per_gpu"):
            rounds.setdefault((r["group"], r["name"].rsplit(ROUND, 1)[0]), []).append(r["tokens_per_s_per_gpu"])
    baselines: dict[str, float] = {}
    for (group, _), rates in rounds.items():
        baselines.setdefault(group, statistics.median(rates))
    return [f"{name}: median {statistics.median(rates):,.0f} tokens/s/GPU over {len(rates)} rounds "
            f"({min(rates):,.0f}-{max(rates):,.0f}), {statistics.median(rates) / baselines[group]:.3f}x the group's first case"
            for (group, name), rates in rounds.items() if len(rates) > 1]


def fp8_lines(rows: list[dict], matmul: dict | None, device: str) -> list[str]:
    """Each timed case's TFLOP/s against the FP8 peak, measured (the e4m3 8192-cube) and datasheet, and each fp8
    case's speed over the bf16 default and over the best bf16 peer (--suite fp8)."""
    from training.hardware import gpu_for_device_name

    fp8_cases = [r for r in rows if r["settings"].get("precision") == "fp8" or r["recipe"] == "fp8-peer"]
    if not fp8_cases:
        return []
    cube = [rates[FP8_CUBE] for rates in (matmul or {}).get("per_rank", []) if FP8_CUBE in rates]
    measured = statistics.median(cube) if cube else None
    gpu = gpu_for_device_name(device) if device else None
    datasheet = gpu.fp8_tflops if gpu and gpu.fp8_tflops else None
    timed = [r for r in rows if r.get("tflops_per_gpu")]
    lines = [f"MFU against the FP8 peak (measured {measured or 0:.0f}, datasheet {datasheet or 0:.0f} TFLOP/s): " + ", ".join(
        f"{r['name']} {r['tflops_per_gpu'] / measured:.1%} / {r['tflops_per_gpu'] / datasheet:.1%}" if measured and datasheet
        else f"{r['name']} n/a" for r in timed)]
    default = next((r for r in timed if r["recipe"] == "trainer" and r["settings"].get("precision", "bf16") == "bf16"
                    and not r.get("levers")), None)
    peers = [r for r in timed if r["recipe"] in ("liger", "example")]
    best_peer = max(peers, key=lambda r: r["tokens_per_s_per_gpu"], default=None)
    for r in (r for r in fp8_cases if r.get("tokens_per_s_per_gpu")):
        parts = []
        if default:
            parts.append(f"{r['tokens_per_s_per_gpu'] / default['tokens_per_s_per_gpu']:.3f}x the bf16 default")
        if best_peer:
            parts.append(f"{r['tokens_per_s_per_gpu'] / best_peer['tokens_per_s_per_gpu']:.3f}x the best bf16 peer "
                         f"({best_peer['name']})")
        if parts:
            lines.append(f"{r['name']}: " + ", ".join(parts))
    return lines


PARITY_FINAL_TOLERANCE = 0.005
PARITY_STEP_TOLERANCE = 0.02


def parity_lines(rows: list[dict]) -> list[str]:
    """--suite parity: fp8's and the repeated bf16's losses against bf16's, same seed and data: the final validation
    loss (issue 35: within 0.5%) and the largest step-by-step difference (no step over 2%); the repeat is the
    noise floor that fp8's differences are read against."""
    by_name = {r["name"]: r for r in rows if r.get("group") == "parity" and r.get("losses")}
    base = by_name.get("parity: bf16")
    if not base:
        return []
    lines = []
    for name in ("parity: bf16, repeated", "parity: fp8 tensorwise"):
        other = by_name.get(name)
        if not other:
            continue
        final = other["val_loss"] / base["val_loss"] - 1
        steps = [abs(b / a - 1) for a, b in zip(base["losses"], other["losses"])]
        worst = max(range(len(steps)), key=steps.__getitem__)
        holds = abs(final) <= PARITY_FINAL_TOLERANCE and steps[worst] <= PARITY_STEP_TOLERANCE
        lines.append(f"{name} against bf16 over {len(steps)} steps: validation loss {other['val_loss']:.4f} vs "
                     f"{base['val_loss']:.4f} ({final:+.2%}), largest step difference {steps[worst]:.2%} at step "
                     f"{worst + 1}: parity {'holds' if holds else 'fails'} (0.5% final, 2% a step)")
    return lines


def measured_peak_tflops(out: Path) -> tuple[float | None, dict | None]:
    path = out / "results" / "matmul.json"
    if not path.is_file():
        return None, None
    data = json.loads(path.read_text())
    cube = [rates["8192x8192x8192"] for rates in data["per_rank"]]
    return statistics.median(cube), data


def run_group(group: Group, out: Path, args) -> int:
    spec = {"name": group.name, "env": group.env, "measure_matmul": group.measure_matmul,
            "gpus_per_node": group.gpus_per_node, "measure_links": group.measure_links,
            "cases": [dataclasses.asdict(c) for c in group.cases]}
    spec_file = out / f"group-{group.name}.json"
    spec_file.write_text(json.dumps(spec, indent=1))
    nccl_dir = out / "nccl"
    nccl_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **group.env, **extra_path(args.site), "NCCL_DEBUG": "INFO",
           "NCCL_DEBUG_FILE": str(nccl_dir / f"{group.name}.%h.%p.log"), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    if group.world_size < args.gpus and "CUDA_VISIBLE_DEVICES" not in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(group.world_size))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={group.world_size}",
               "-m", "training.bench", "--worker", str(spec_file), "--out", str(out), "--model", args.model,
               "--warmup", str(args.warmup), "--steps", str(args.steps)]
    print(f"== group {group.name}: {group.world_size} GPU(s), {len(group.cases)} case(s), env {group.env or 'normal'}", flush=True)
    with open(out / f"group-{group.name}.log", "w", buffering=1) as log:  # a killed run keeps its rows
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log.write(line)
            if line.startswith("{") or "Error" in line or "error" in line.split(":")[0]:
                print(line.rstrip()[:400], flush=True)
        return proc.wait()


# Sockets groups and the NVLink group (and name suffix) of the same cases, which gives their compute time.
EMULATION_PAIRS = {"layouts-sockets": ("layouts-nvlink", ""), "accumulation-sockets": ("accumulation-nvlink", ", NVLink")}


def emulation_rows(rows: list[dict], links: dict[str, dict], model_name: str) -> list[dict]:
    """training.plan's step time for each emulated-link case next to the measured one, twice.

    The link is the same run's all-gather bus bandwidth at one decoder layer's size (in the case's NCCL
    environment). "predicted" takes the compute time from the planner's own calibration: the whole model
    under test. "predicted, run's compute" takes it from the same case over NVLink in this run, where
    communication is small: what it then tests is the traffic and overlap arithmetic alone.
    """
    from training.hardware import GPUS
    from training.plan import CALIBRATION, MODELS, Cluster, Layout, Workload, estimate

    ok = {(r["group"], r["name"]): r for r in rows if "error" not in r}
    out = []
    for r in rows:
        nvlink_group, suffix = next(((nv, sfx) for sockets, (nv, sfx) in EMULATION_PAIRS.items()
                                     if r.get("group") in (sockets, nv)), (None, ""))
        link = links.get(r.get("group"), {}).get("all_gather layer")
        if nvlink_group is None or "error" in r or not link:
            continue
        base = ok.get((nvlink_group, r["name"].removesuffix(", sockets").removesuffix(suffix) + suffix))
        if not base:
            continue
        st = r["settings"]
        work = Workload(seq_len=st["seq_len"], micro_batch=st["micro_batch"], grad_accum=st["grad_accum"],
                        activation_checkpointing=st["activation_checkpointing"], loss_chunk_tokens=st["loss_chunk_tokens"])
        gpu = GPUS["H200"]
        efficiency = base["tokens_per_s_per_gpu"] * base["flops_per_token"] / (CALIBRATION.matmul_peak(gpu) * 1e12)
        key = (work.activation_checkpointing == "full", work.seq_len * work.micro_batch)  # the calibration's keys
        cluster = Cluster(gpu=gpu, nodes=2, gpus_per_node=1, inter_node_gbps=link["busbw_gbps"], name="2 x (1 H200)")
        layout = Layout(st["sharding"], not st["reshard_after_forward"], st["reduce_dtype"])
        standing = dataclasses.replace(CALIBRATION, link_efficiency=1.0)
        own = dataclasses.replace(standing, efficiency={key: efficiency}, one_gpu={})  # this run's compute only
        predicted = estimate(MODELS[model_name], work, cluster, layout, standing)
        own_compute = estimate(MODELS[model_name], work, cluster, layout, own)
        out.append({"name": r["name"], "group": r["group"], "measured_step_s": r["step_time_s"],
                    "predicted_step_s": predicted.step_s, "error": predicted.step_s / r["step_time_s"] - 1,
                    "predicted_run_compute_step_s": own_compute.step_s,
                    "error_run_compute": own_compute.step_s / r["step_time_s"] - 1,
                    "link_busbw_gbps": link["busbw_gbps"], "bound": predicted.bound,
                    "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"]})
    return out


def reduce_dtype_comparison(rows: list[dict]) -> str | None:
    """How bf16 gradient reduction moves the loss curve against fp32, same seed, data and steps."""
    curves = {r["settings"]["reduce_dtype"]: r.get("losses") for r in rows
              if r.get("group") == "reduce-dtype-loss" and "error" not in r and r.get("losses")}
    if set(curves) != {"fp32", "bf16"}:
        return None
    fp32, bf16 = curves["fp32"], curves["bf16"]
    gaps = [abs(a - b) for a, b in zip(fp32, bf16)]
    tail = len(fp32) // 4
    mean_tail = lambda xs: sum(xs[-tail:]) / tail  # noqa: E731
    return (f"bf16 against fp32 gradient reduction over {len(fp32)} steps (pattern data): loss {fp32[0]:.4f} -> "
            f"{fp32[-1]:.4f} (fp32) and {bf16[0]:.4f} -> {bf16[-1]:.4f} (bf16); largest gap {max(gaps):.4f}, "
            f"mean of the last {tail} steps {mean_tail(fp32):.4f} vs {mean_tail(bf16):.4f}")


def accumulation_comparison(rows: list[dict], out: Path) -> list[str]:
    """Per grad_accum, each accumulation variant's loss over the last quarter of its steps and its final
    validation loss; the curves in OUT/accumulation.png."""
    runs = [r for r in rows if r.get("group") == "accumulation-loss" and "error" not in r and r.get("losses")]
    lines = []
    for r in runs:
        tail = len(r["losses"]) // 4
        lines.append(f"{r['name']}: loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, mean of the last {tail} "
                     f"steps {sum(r['losses'][-tail:]) / tail:.4f}, validation loss {r.get('val_loss', float('nan')):.4f}")
    if runs:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        accums = sorted({r["settings"]["grad_accum"] for r in runs})
        fig, axes = plt.subplots(1, len(accums), figsize=(6 * len(accums), 4), squeeze=False)
        for ax, accum in zip(axes[0], accums):
            for r in runs:
                if r["settings"]["grad_accum"] == accum:
                    ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=r["name"].split(", grad_accum")[0], lw=1)
            ax.set(title=f"grad_accum {accum}: Qwen2.5-1.5B shape, pattern data", xlabel="step", ylabel="loss", yscale="log")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "accumulation.png", dpi=110)
    return lines


def format_emulation(rows: list[dict]) -> str:
    lines = ["| case | link GB/s (busbw) | measured s/step | model s/step | error | model, run's compute | error | "
             "model says | tokens/s/GPU |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['link_busbw_gbps']:.1f} | {r['measured_step_s']:.3f} | {r['predicted_step_s']:.3f} | "
                     f"{r['error']:+.0%} | {r['predicted_run_compute_step_s']:.3f} | {r['error_run_compute']:+.0%} | "
                     f"{r['bound']} | {r['tokens_per_s_per_gpu']:,.0f} |")
    return "\n".join(lines)


def report(out: Path, groups: list[Group], gpus: int) -> str:
    from training.metrics import datasheet_peak_tflops
    from training.transport import judge_files

    measured, matmul = measured_peak_tflops(out)
    links = {p.stem.removeprefix("links-"): json.loads(p.read_text()) for p in (out / "results").glob("links-*.json")}
    raw = [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))
           if p.name != "matmul.json" and not p.name.startswith("links-")]
    order = {key: n for n, key in enumerate((g.name, c.name) for g in groups for c in g.cases)}
    raw.sort(key=lambda r: order.get((r["group"], r["name"]), 1 << 30))
    device = next((r.get("device") for r in raw if r.get("device")), "")
    datasheet = datasheet_peak_tflops(device) if device else None
    rows = [summarize(r, measured, datasheet) for r in raw]
    verdicts = {}
    for g in groups:
        logs = sorted((out / "nccl").glob(f"{g.name}.*.log"))
        if logs:
            verdicts[g.name] = judge_files(logs, require_efa=False).line
    lines = [f"device: {device or 'cpu'} x {gpus}; bf16 peak measured {measured:.0f} TFLOP/s (8192-cube matmul, median over ranks), "
             f"datasheet {datasheet or 'n/a'}" if measured else f"device: {device or 'cpu'} x {gpus}; no matmul peak measured"]
    if matmul:
        lines.append("matmul TFLOP/s by shape (rank 0): " + ", ".join(f"{k} {v:.0f}" for k, v in matmul["per_rank"][0].items()))
    lines += ["", format_table(rows), ""]
    lines += [f"- {c}" for c in comparisons(rows)]
    lines += [f"- NCCL transport, group {name}: {line}" for name, line in verdicts.items()]
    comparison = reduce_dtype_comparison(rows)
    if comparison:
        lines.append(f"- {comparison}")
    lines += [f"- {line}" for line in accumulation_comparison(rows, out)]
    lines += [f"- {line}" for line in round_lines(rows)]
    lines += [f"- {line}" for line in fp8_lines(rows, matmul, device)]
    lines += [f"- {line}" for line in parity_lines(rows)]
    emulation = emulation_rows(rows, links, BENCH_MODEL) if links else []
    if emulation:
        lines += ["", "Model against measurement (training.plan; link bandwidth from this run):", "",
                  format_emulation(emulation)]
    text = "\n".join(lines)
    (out / "results.json").write_text(json.dumps({"measured_peak_tflops": measured, "matmul": matmul,
                                                  "datasheet_peak_tflops": datasheet, "transport": verdicts,
                                                  "links": links, "emulation": emulation, "cases": rows}, indent=1))
    (out / "table.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--suite", default="full",
                        choices=("full", "variants", "mfu", "l4", "smoke", "layouts", "accumulation", "lora", "fp8",
                                 "parity"),
                        help="full: default profile, example recipe, the peer recipe (FSDP2 + Liger, when liger-kernel is "
                             "installed or its wheel is in .whl/), L4 profile, sockets A/B, one GPU; "
                             "variants: the levers one at a time; mfu: the h200 step's kernel and communication levers beside the "
                             "peer recipe, FSDP2 + Liger kernels (needs liger-kernel: installed, or its wheel in .whl/); l4: the L4 profile's communication "
                             "lever on NVLink and on sockets; smoke: two quick cases; layouts: full, gathered and "
                             "hybrid at world size 2 as two nodes, on NVLink and sockets, with link bandwidth and "
                             "the model's prediction (2 GPUs); accumulation: fp32 vs bf16 gradient accumulation and "
                             "reduction, 300 steps, then their speed on sockets (2 GPUs); lora: LoRA rank 16 against full fine-tuning, "
                             "Qwen2.5-1.5B and 7B shapes, at the h200 profile and the capped l4 profile (needs peft: "
                             "installed, or its wheels in .whl/ from `make bench-wheels`); fp8: bf16 against fp8 "
                             "(tensorwise with float8 and bf16 all-gather, rowwise) beside the bf16 and an FP8 peer recipe; "
                             "parity: bf16, bf16 again and fp8 for 300 steps on pattern data, with validation loss (both "
                             "need torchao and liger-kernel: installed, or their wheels in .whl/)")
    parser.add_argument("--groups", default=None, help="comma-separated subset of the suite's groups to run")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all visible)")
    parser.add_argument("--model", default=BENCH_MODEL, help="built-in model config (random init)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per case (compilation happens here)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per case")
    parser.add_argument("--cases", default=None, help="'|'-separated names of the selected groups' cases to run (default: all)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each group's cases this many times in turn, and report each case's median")
    parser.add_argument("--out", default="bench-out", help="output folder")
    parser.add_argument("--cpu", action="store_true", help="run on CPU with gloo (tests of the benchmark itself)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.out, args.model, args.warmup, args.steps)
        return 0
    error = check_args(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    args.site = None
    if args.suite in SUITE_PACKAGES:
        package, required = SUITE_PACKAGES[args.suite]
        try:
            args.site = wheel_site(out, package)
        except RuntimeError as error:
            if required:
                print(f"error: --suite {args.suite}: {error}", file=sys.stderr)
                return 2
            print(f"note: {error}: the peer recipe's case will say so", file=sys.stderr)
    groups = plan(args.suite, args.gpus)
    if args.groups:
        known, wanted = [g.name for g in groups], args.groups.split(",")
        unknown = [name for name in wanted if name not in known]
        if unknown:
            print(f"error: --groups: {', '.join(unknown)} not in suite {args.suite} on {args.gpus} GPU(s); "
                  f"its groups: {', '.join(known)}", file=sys.stderr)
            return 2
        groups = [g for g in groups if g.name in wanted]
    if args.cases:
        known, wanted = [c.name for g in groups for c in g.cases], args.cases.split("|")
        unknown = [name for name in wanted if name not in known]
        if unknown:
            print(f"error: --cases: {', '.join(unknown)} not in the selected groups; their cases: {' | '.join(known)}",
                  file=sys.stderr)
            return 2
        groups = [dataclasses.replace(g, cases=[c for c in g.cases if c.name in wanted]) for g in groups]
        groups = [g for g in groups if g.cases]
    groups = with_rounds(groups, args.rounds)
    failed = [g.name for g in groups if run_group(g, out, args) != 0]
    print(report(out, groups, args.gpus))
    if failed:
        print(f"error: group(s) {', '.join(failed)} exited non-zero; see {out}/group-<name>.log", file=sys.stderr)
        return 1
    return 0


def unwritable_folder(out: Path) -> str | None:
    """Why the results cannot be written to this folder (made if missing), or None: found before
    the GPUs are booked, not at the first result."""
    if out.exists() and not out.is_dir():
        return "it is a file"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        return error.strerror
    return None


# The package a suite needs beyond the trainer's own (its import name), from .whl/ when missing.
# (import name, whether the suite is refused without it): the full suite runs without its peer.
SUITE_PACKAGES = {"lora": ("peft", True), "mfu": (PEER_MODULE, True), "full": (PEER_MODULE, False),
                  "fp8": ("torchao", True), "parity": ("torchao", True)}


def wheel_site(out: Path, package: str) -> str | None:
    """Where the workers import `package` from: None when it is installed, else OUT/site-packages, filled
    from the wheels in .whl/ (offline, without dependencies: the rest comes with transformers and torch)."""
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        return None
    wheels = sorted(str(w) for w in WHEELS.glob("*.whl"))
    if not wheels:
        raise RuntimeError(f"{package} is not installed and {WHEELS} holds no wheels (make bench-wheels, then carry .whl)")
    site = out / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(site),
                    *wheels], check=True)
    print(f"{package} from {', '.join(Path(w).name for w in wheels)}, installed into {site}", flush=True)
    return str(site)


def extra_path(site: str | None) -> dict[str, str]:
    """PYTHONPATH with `site` in front (nothing when None)."""
    if site is None:
        return {}
    return {"PYTHONPATH": os.pathsep.join([site, *filter(None, [os.environ.get("PYTHONPATH")])])}


def check_args(args) -> str | None:
    """Fill in --gpus and refuse what cannot run, as one line naming the option."""
    if args.model not in BUILTIN_MODELS:
        return f"--model: {args.model!r} is not a built-in config ({', '.join(BUILTIN_MODELS)})"
    if args.warmup < 1 or args.steps < 1:
        return f"--warmup/--steps: {args.warmup}/{args.steps} must both be at least 1"
    if args.rounds < 1:
        return f"--rounds: {args.rounds} must be at least 1"
    if args.gpus is not None and args.gpus < 1:
        return f"--gpus: {args.gpus} must be at least 1"
    unwritable = unwritable_folder(Path(args.out))
    if unwritable:
        return f"--out: {args.out!r} is not a writable folder ({unwritable})"
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        args.gpus = args.gpus or 1
        return None
    import torch

    visible = torch.cuda.device_count()
    if visible == 0:
        return "no CUDA GPU visible: the benchmark needs at least one (--cpu runs it on CPU for testing)"
    args.gpus = args.gpus or visible
    if not 1 <= args.gpus <= visible:
        return f"--gpus: {args.gpus} must be between 1 and the {visible} visible GPU(s)"
    return None


if __name__ == "__main__":
    sys.exit(main())
