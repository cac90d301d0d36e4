"""The trainer's sharding layout from where the workers were placed: `--sharding auto` resolved.
"""

from __future__ import annotations

from planning.calibration import CALIBRATION
from planning.memory import memory_bytes, usable_bytes
from planning.search import choose, fit_error
from planning.workload import SHARDINGS, Layout, ModelShape, Workload, cluster_of
from planning.hardware import GIB
from training.gpus import GpuSpec


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
