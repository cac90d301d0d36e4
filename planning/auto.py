"""Every auto setting resolved into explicit options before the trainer starts: at synth for the RayJob's
entrypoint, and by `python -m planning.train` for a run started by hand. The trainer itself knows no planner:
it runs the options it is given.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planning.calibration import CALIBRATION
from planning.hardware import GIB, INSTANCE_TYPES
from planning.memory import memory_bytes, usable_bytes
from planning.search import SHAPE_OPTIONS, auto_line, choose, fit_error
from planning.timing import Estimate, estimate
from planning.families import ShapeError
from planning.fp8 import resolve_precision
from planning.model_config import ModelConfigError, UnsupportedFamily, model_shape
from planning.workload import SHARDINGS, Layout, ModelShape, Workload, cluster_of
from training.command_line import options_argv, parse_args
from training.config import AUTO, ConfigError, TrainConfig, option_flag
from training.gpus import GpuSpec


class PlanError(ConfigError):
    """Options that are each valid but that the planner refuses together: the run does not fit, or auto cannot
    plan it. Raised after every other check, so a value that is wrong in itself is named first."""


class LayoutError(ValueError):
    """The planner cannot pick a sharding layout for the run; the message is one line."""


SET_EXPLICITLY = "or set --micro-batch, --activation-checkpointing and --sharding instead of auto"


def model_of(c: TrainConfig, configs: dict | None, needed: bool) -> ModelShape | None:
    """The run's model shape: a calibrated built-in, or counted from its config.json (planning.model_config: read
    from `configs`, the cdk.context.json cache, which gains what was looked up). None when it can't be read and
    the run does not need it; PlanError naming --model (and how to give the shape) when it does, or when the
    trainer does not train the model's family."""
    try:
        shape, new = model_shape(c.model, c.model_revision, {} if configs is None else configs)
    except UnsupportedFamily as error:  # the trainer would refuse it at start, auto or not
        raise PlanError(f"{error}; {SET_EXPLICITLY}" if needed else str(error)) from None
    except (ShapeError, ModelConfigError) as error:
        if needed:
            raise PlanError(f"{'' if isinstance(error, ModelConfigError) else '--model: '}{error}; {SET_EXPLICITLY}") from None
        return None
    if configs is not None:
        configs.update(new)
    return shape


def planned(c: TrainConfig, configs: dict | None = None, needed: bool = False):
    """(model shape, cluster) of the run where the planner knows both: a known instance type and model, whole
    nodes of workers (or fewer workers than one node's GPUs); else None (PlanError where `needed` and the model's
    shape can't be read)."""

    spec = INSTANCE_TYPES.get(c.instance_type or "")
    if spec is None or spec.gpu is None or (c.workers > spec.gpus and c.workers % spec.gpus):
        return None
    model = model_of(c, configs, needed)
    if model is None:
        return None
    nodes = max(c.workers // spec.gpus, 1)
    return model, dataclasses.replace(cluster_of(spec.name, nodes), gpus_per_node=min(c.workers, spec.gpus))


def check_fit(c: TrainConfig, configs: dict | None = None) -> None:
    """On a known instance type and model, the run's shape must fit a GPU in one layout it may use
    (the memory model): refused at synth, or before a local run starts, rather than out of memory on the nodes."""

    found = planned(c, configs)
    if found is None:
        return
    model, cluster = found
    work = Workload(seq_len=c.seq_len, micro_batch=c.micro_batch, grad_accum=c.grad_accum,
                    activation_checkpointing=c.activation_checkpointing, loss_chunk_tokens=c.loss_chunk_tokens,
                    lora_rank=c.lora_rank)
    shardings = SHARDINGS if c.sharding == "auto" else (c.sharding,)
    problem = fit_error(model, work, cluster, shardings, not c.reshard_after_forward, c.reduce_dtype)
    if problem:
        raise PlanError(problem)


def resolve_auto(c: TrainConfig, configs: dict | None = None) -> tuple[TrainConfig, str | None]:
    """The run's options with auto micro-batch and recomputation replaced by planning.plan's pick, and the line
    that says what it picked and why (None when neither is auto). The pick is the fastest that fits (layout,
    micro-batch, recomputation, of those the options leave to auto) at the same batch: each worker's sequences
    per step stay --batch-tokens / (--workers x --seq-len), so the optimisation does not change. PlanError (one
    line naming the option to change) when auto cannot plan the run or nothing fits."""

    free = tuple(o for o in SHAPE_OPTIONS if getattr(c, o) == AUTO)
    if not free:
        return c, None
    found = planned(c, configs, needed=True)
    if found is None:
        raise PlanError(f"{option_flag(free[0])}: auto needs a known --instance-type (planning/hardware.py), whole nodes of "
                        f"workers (--workers); set {' and '.join(option_flag(o) for o in free)} instead")
    model, cluster = found
    if "micro_batch" in free:
        micro_batch, grad_accum = c.batch_tokens // (c.workers * c.seq_len), 1  # every sequence in one, to be split
    else:
        micro_batch, grad_accum = c.micro_batch, c.grad_accum
    work = Workload(seq_len=c.seq_len, micro_batch=micro_batch, grad_accum=grad_accum,
                    activation_checkpointing="full" if "activation_checkpointing" in free else c.activation_checkpointing,
                    loss_chunk_tokens=c.loss_chunk_tokens, steps=c.steps, lora_rank=c.lora_rank)
    shardings = SHARDINGS if c.sharding == "auto" else (c.sharding,)
    keep_gathered = not c.reshard_after_forward
    chosen = choose(model, work, cluster, keep_gathered, c.reduce_dtype, shapes=free, shardings=shardings)
    if chosen is None:
        raise PlanError(fit_error(model, work, cluster, shardings, keep_gathered, c.reduce_dtype, free=free))
    picked = dataclasses.replace(c, micro_batch=chosen.work.micro_batch, grad_accum=chosen.work.grad_accum,
                                 activation_checkpointing=chosen.work.activation_checkpointing)
    return picked, auto_line(model, work, cluster, chosen, free, shardings)


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


@dataclass(frozen=True)
class Resolved:
    config: TrainConfig
    """The run's options with no auto left."""
    line: str | None
    """What auto picked for the micro-batch and recomputation, and why; None when neither was auto."""
    estimate: Estimate | None
    """The planner's estimate of the run as resolved; None where it knows the model or the nodes not."""


def check_instance_type(c: TrainConfig) -> None:
    if c.instance_type is not None and c.instance_type not in INSTANCE_TYPES:
        raise ConfigError(f"--instance-type: {c.instance_type!r} is not in planning/hardware.py "
                          f"({', '.join(sorted(INSTANCE_TYPES))})")


def workload_of(c: TrainConfig) -> Workload:
    return Workload(seq_len=c.seq_len, micro_batch=c.micro_batch, grad_accum=c.grad_accum,
                    activation_checkpointing=c.activation_checkpointing, loss_chunk_tokens=c.loss_chunk_tokens,
                    steps=c.steps, lora_rank=c.lora_rank)


def resolve_run(c: TrainConfig, configs: dict | None = None) -> Resolved:
    """A validated run's options with every auto resolved: micro-batch and recomputation (resolve_auto), then the
    sharding layout, the fastest that fits on the nodes (one machine: full). A fixed shape is held to the memory
    (check_fit). PlanError, one line naming the option, when the planner cannot resolve an auto."""
    check_instance_type(c)
    if AUTO in (c.micro_batch, c.activation_checkpointing):
        c, line = resolve_auto(c, configs)
    else:
        check_fit(c, configs)
        line = None
    found = planned(c, configs, needed=(c.sharding == AUTO and not c.local) or c.precision == AUTO)
    if c.sharding == AUTO:
        if found is not None:
            model, cluster = found
            try:
                sharding, _ = resolve_sharding(AUTO, model, workload_of(c), cluster.nodes, cluster.gpus_per_node,
                                               cluster.gpu, c.instance_type, not c.reshard_after_forward, c.reduce_dtype)
            except LayoutError as error:
                raise PlanError(str(error)) from None
        elif c.local:
            sharding = "full"  # one machine: a hybrid mesh would be the same
        else:
            raise PlanError("--sharding: auto needs a known --instance-type (planning/hardware.py), whole nodes of "
                            "workers (--workers); set --sharding full or hybrid instead")
        c = dataclasses.replace(c, sharding=sharding)
    if c.precision == AUTO:
        c, picked = resolve_precision_auto(c, found)
        line = f"{line}; {picked}" if line else picked
    if found is None:
        return Resolved(c, line, None)
    model, cluster = found
    layout = Layout(c.sharding, not c.reshard_after_forward, c.reduce_dtype)
    return Resolved(c, line, estimate(model, workload_of(c), cluster, layout))


def fp8_shard(c: TrainConfig, cluster) -> int:
    """The GPUs each weight is sharded over: every GPU with full sharding, a node's with hybrid."""
    return cluster.gpus_per_node if c.sharding == "hybrid" else cluster.world


def resolve_precision_auto(c: TrainConfig, found) -> tuple[TrainConfig, str]:
    """--precision auto as planning.fp8 picks it for the run's GPU and shape, and the line that says why; PlanError
    naming --precision where the planner does not know the GPU or the model."""
    if found is None:
        raise PlanError("--precision: auto needs a known --instance-type (planning/hardware.py) and model, whole nodes "
                        "of workers (--workers); set --precision bf16 or fp8 instead")
    model, cluster = found
    precision, why = resolve_precision(cluster.gpu, workload_of(c), model, fp8_shard(c, cluster), not c.reshard_after_forward,
                                       c.lora_rank)
    return dataclasses.replace(c, precision=precision), f"precision auto: {precision} ({why})"


def predicted_link_gbps(found: Estimate) -> float | None:
    """GB/s, one way, that the planner expects of the slowest link the step's collectives cross: each node's
    network on several nodes, the intra-node link per GPU on one (bytes over time of the estimate's own terms)."""
    if found.inter_s > 0:
        return found.inter_bytes / found.inter_s / 1e9
    if found.intra_s > 0:
        return found.intra_bytes / found.intra_s / 1e9
    return None


def resolve_options(options: dict, configs: dict | None = None) -> tuple[dict, str | None]:
    """The trainer's options (TrainConfig names, as the RayJob passes them) with every auto replaced by its pick,
    and the planner's predicted step time and link bandwidth added where it knows the run; and auto's line.
    `configs`: the models' cached config.json fields (cdk.context.json), which gains what was looked up."""
    run = resolve_run(parse_args(options_argv(options)), configs)
    resolved = {k: getattr(run.config, k) if v == AUTO else v for k, v in options.items()}
    if run.estimate is not None:
        resolved["predicted_step_seconds"] = round(run.estimate.step_s, 3)
        link = predicted_link_gbps(run.estimate)
        if link:
            resolved["predicted_link_gbps"] = round(link, 3)
    return resolved, run.line
