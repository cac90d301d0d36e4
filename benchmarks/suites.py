"""The benchmark's suites: which groups of cases each runs (one torchrun per group, one NCCL environment),
and the cases of each group: the trainer at its profiles, the levers one at a time, layouts, accumulation, LoRA.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from training.config import GPU_PROFILES, TrainConfig
from training.config_rules import validate


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
FP8_PEER = Case("peer FP8: torchao float8 on Hugging Face's model, FSDP2, compiled layers, Liger loss", recipe="fp8-peer")


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
    if suite == "fp8-80gb":
        return fp8_groups(default, gpus, FP8_80GB_MICRO_BATCH, FP8_80GB_LARGER)
    groups = [Group("main", gpus, [default, *example], measure_matmul=True), Group("peer", gpus, [PEER])]
    groups += [Group(f"l4-world{world}", world, [l4]) for world in l4_worlds]
    groups.append(Group("sockets", gpus, [Case(f"{default.name}, NCCL sockets only")], env=dict(SOCKETS_ENV)))
    if gpus > 1:
        groups.append(Group("world1", 1, [Case(f"{default.name}, one GPU")]))
    return groups


# Levers that are process settings: each runs the default case in its own torchrun.
# NCCL_CTA_POLICY=1 (NCCL 2.27+, "efficiency"): NCCL uses as few CTAs as keep its speed, leaving SMs to the
# overlapped compute (NCCL's docs, "NCCL Communicator CTA Policy Flags").
MFU_ENV_GROUPS = {"expandable-segments": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                  "nccl-max-8-ctas": {"NCCL_MAX_CTAS": "8"}, "nccl-cta-efficiency": {"NCCL_CTA_POLICY": "1"},
                  "copy-engine-all-gather": {"NCCL_CTA_POLICY": "2"}}


# The levers an env group's case enters (the copy engines gather only from symmetric memory).
MFU_ENV_LEVERS = {"copy-engine-all-gather": ("symmetric-memory",)}


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


# --suite fp8: micro-batches that the memory fp8 frees at the h200 profile make room for (74 GiB at 8 against bf16's
# 91 on an H200 of 141 GB).
FP8_MICRO_BATCHES = (12, 16)


# --suite fp8-80gb: the same comparison where the h200 profile does not fit (H100, 80 GB: bf16 peaks at 91 GiB
# there): 4 x 4096 for every recipe, and fp8 at 6, the micro-batch its memory makes room for.
FP8_80GB_MICRO_BATCH, FP8_80GB_LARGER = 4, (6,)


def fp8_groups(default: Case, gpus: int, micro_batch: int | None = None,
               larger: tuple[int, ...] = FP8_MICRO_BATCHES) -> list[Group]:
    """Issues 35 and 39: the h200 step in bf16 and in float8 (tensorwise, float8 all-gather), and float8's levers
    each alone: larger micro-batches (bf16 and the bf16 peer at the first of them too), k/v in float8 too,
    Inductor's coordinate-descent tuning and max-autotune (fusing casts and scales into neighbouring kernels),
    rowwise scaling; beside the bf16 peer and an FP8 peer recipe, in one run; the matmul rates give the bf16 and FP8 peaks. micro_batch: every recipe at this one
    instead of the profile's (a GPU the profile does not fit); rowwise then left out (profiled instead)."""
    shape = {"micro_batch": micro_batch} if micro_batch else {}
    fp8 = {"precision": "fp8"} | shape
    cases = [dataclasses.replace(default, name=f"{default.name}{', micro-batch %d' % micro_batch if micro_batch else ''}",
                                 overrides=dict(shape)),
             Case("trainer, fp8 tensorwise, float8 all-gather", overrides=fp8),
             *(Case(f"trainer, fp8, micro-batch {m}", overrides=fp8 | {"micro_batch": m}) for m in larger),
             # bf16 at fp8's first larger micro-batch: how much of fp8's gain there is the micro-batch alone (an
             # out-of-memory row where bf16 does not fit).
             Case(f"trainer, bf16, micro-batch {larger[0]}", overrides={"micro_batch": larger[0]}),
             *(Case(f"trainer, fp8 + {lever}", overrides=fp8, levers=(lever,))
               for lever in ("fp8-kv", "coordinate-descent", "max-autotune")),
             *([] if micro_batch else [Case("trainer, fp8 rowwise", overrides=fp8, levers=("fp8-rowwise",))])]
    if gpus > 1:  # one GPU gathers nothing: float8 against bf16 all-gather only where the weights travel
        cases.insert(2, Case("trainer, fp8 tensorwise, bf16 all-gather", overrides=fp8, levers=("fp8-bf16-all-gather",)))
    peers = [*(dataclasses.replace(peer, overrides=dict(shape)) for peer in (PEER, FP8_PEER)),
             dataclasses.replace(PEER, name=f"{PEER.name}, micro-batch {larger[0]}", overrides={"micro_batch": larger[0]})]
    return [Group("main", gpus, cases, measure_matmul=True), Group("peer", gpus, peers)]


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
# one gradient all-reduce per step; it calibrates the link and compute terms of planning.plan, which
# carries hybrid's in-node advantage at 2 x 4.
LAYOUT_CASES = [
    ("l4", {}), ("l4", {"reshard_after_forward": False}), ("l4", {"sharding": "hybrid"}),
    ("l4", {"sharding": "hybrid", "reduce_dtype": "bf16"}),
    ("h200", {"reshard_after_forward": True}), ("h200", {}), ("h200", {"sharding": "hybrid"}),
]


def layout_name(profile: str, overrides: dict) -> str:
    from planning.workload import Layout

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


ROUND = ", round "


def with_rounds(groups: list[Group], rounds: int) -> list[Group]:
    """Each group's cases run `rounds` times in turn (a, b, a, b, ...), named ", round k": a host-bound shape varies
    by more between steps and machines than a lever moves it, and a drift within the process hits every case."""
    if rounds == 1:
        return groups
    return [dataclasses.replace(g, cases=[dataclasses.replace(c, name=f"{c.name}{ROUND}{k}")
                                          for k in range(1, rounds + 1) for c in g.cases]) for g in groups]
