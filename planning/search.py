"""The layout and batch search: every layout and micro-batch that keeps the batch, the fastest that fits,
why nothing fits, and the smallest batch that keeps the links under their share of the step.
"""

from __future__ import annotations

import dataclasses
import math

from planning.calibration import CALIBRATION, Calibration
from planning.memory import usable_bytes
from planning.timing import LINK_SHARE_TARGET, Estimate, estimate
from planning.workload import ALL_LAYOUTS, SHARDINGS, Cluster, Layout, ModelShape, Workload
from training.config import RECOMPUTATION
from planning.hardware import GIB


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
            f"{steps} steps, ~{run_duration(run_s)}, ~${cluster.usd_per_hour * run_s / 3600:,.2f} (a larger batch changes "
            "the optimisation: retune the learning rate)")


def run_duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
