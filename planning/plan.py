"""What a deployment will do, before anyone pays: `python -m planning.plan --help`.

For an instance type, a number of nodes and the training settings, each sharding layout gets its
FLOPs and the bytes it moves per optimizer step on the intra-node and the inter-node links, the
time of each, which one bounds the step, the tokens/s per GPU, the memory per GPU, and the time
and dollars of the run. auto (`--sharding`, `--micro-batch`, `--activation-checkpointing`) trains with
the fastest layout, micro-batch and recomputation that fit in memory at the same tokens per step, and
never with any that does not; the plan also names a faster setting the options fix, where one fits, and the
smallest batch that keeps the links at most 10% of the step.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from planning.calibration import CALIBRATION, Calibration
from planning.search import (RECOMPUTATION_WORDS, SHAPE_OPTIONS, auto_line, batch_line, choose, describe_shape, fit_error,
                             rank_layouts, run_duration)
from planning.timing import Estimate
from planning.workload import MODELS, REDUCE_DTYPES, SHARDINGS, Cluster, ModelShape, Workload, cluster_of
from training.config import RECOMPUTATION
from planning.hardware import INSTANCE_TYPES


# The rank the planner suggests when full fine-tuning does not fit (peft's examples use 8 to 64).
LORA_RANK_SUGGESTED = 16


def summary_line(model: ModelShape, work: Workload, cluster: Cluster, chosen: Estimate) -> str:
    """One line for the synth review: what the deployment will do with its layout and shape."""
    return (f"{cluster.name}, {chosen.layout.name}, {describe_shape(chosen.work)}: {chosen.bound}, "
            f"~{chosen.tokens_per_s_per_gpu:,.0f} tok/s/GPU, {work.steps} steps in ~{run_duration(chosen.run_s)}, "
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
                    f"{e.mfu:.1%} | {e.memory_gib:.1f} | {'yes' if e.fits else 'NO'} | {run_duration(e.run_s)} | "
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
    parser.add_argument("--instance-type", default="g6.12xlarge", help="an EFA GPU type of planning/hardware.py")
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
