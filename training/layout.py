"""Where Ray placed the workers, as a sharding layout needs it: nodes and workers per node, or why not."""

from __future__ import annotations


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
