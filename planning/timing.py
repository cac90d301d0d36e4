"""The step time of a layout: FLOPs and the bytes each link moves per optimizer step, how they overlap, and
which one bounds the step.

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
through each node's network. Every figure is a datasheet (planning/hardware.py) or calibrated by a
measurement recorded in docs/bench-results/ (CALIBRATION, with the run it came from).
"""

from __future__ import annotations

from dataclasses import dataclass

from planning.calibration import CALIBRATION, Calibration
from planning.memory import memory_bytes, usable_bytes
from planning.workload import REDUCE_DTYPES, Cluster, Layout, ModelShape, Workload
from planning.hardware import GIB


# The share of the step the links may take beyond the compute: more, and the step is link-bound and the batch is
# worth raising.
LINK_SHARE_TARGET = 0.10

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
