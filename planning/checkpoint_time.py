"""How long a stop takes to save the current step on the cluster: what the worker pods' termination grace period
must cover (training.preemption; the setting training.termination_grace_period_seconds).

A drained pod's preStop hook asks the trainer to save; the ranks see it at the next step boundary (one step), then
save synchronously: each rank writes its shards locally and uploads them, and rank 0 commits once every rank's files
are in storage (training.checkpoint). Per node:
- bytes: 12 per trained parameter (fp32 weights and AdamW's two fp32 moments, as planning.memory counts the state)
  and, with LoRA, 2 per frozen base weight (bf16), over the nodes. Qwen2.5-1.5B: 1.54e9 x 12 = 18.5 GB, 9.3 GB a
  node on two; DCP wrote it as 19.5 GB (docs/benchmarks.md, "Checkpoint stall"), so CHECKPOINT_OVERHEAD adds 5%.
- the local write: each rank its share, at the rate of DCP's measured background write (19.5 GB in 23 s on an
  H200 machine, docs/benchmarks.md), which included an fsync per file the trainer no longer does (local_writer).
- the upload: each rank one connection at S3_STREAM_BYTES_PER_S (AWS's "Performance design patterns for Amazon
  S3": one concurrent request per 85-90 MB/s), within the node's network. Assumed, not measured: pyarrow
  uploads a file's parts concurrently, so this is the slow end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planning.workload import Cluster, ModelShape

BYTES_PER_TRAINED_PARAM = 12
BYTES_PER_FROZEN_PARAM = 2
CHECKPOINT_OVERHEAD = 19.5 / 18.5
"""What DCP wrote for Qwen2.5-1.5B (19.5 GB) over its parameters' state (1.54e9 x 12 bytes)."""
LOCAL_WRITE_BYTES_PER_S = 19.5e9 / 23
"""DCP's background write measured on one H200 machine (docs/benchmarks.md, "Checkpoint stall": 23 s)."""
S3_STREAM_BYTES_PER_S = 85e6
COMMIT_S = 1.0
"""Rank 0's check that every rank's files are in storage, then its marker (training.checkpoint.COMMIT_POLL_S)."""
GRACE_MARGIN_S = 30
"""Beyond the step and the save: the hook's start and answer, and Ray's drain of the node after SIGTERM
(ray/_private/node.py, RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S), in which Ray Train sees the preemption."""
FALLBACK_GRACE_S = 120
"""The grace period where the planner knows the run not: a spot interruption's two minutes."""
SPOT_NOTICE_S = 120


@dataclass(frozen=True)
class StopEstimate:
    bytes_per_node: float
    step_s: float
    write_s: float
    upload_s: float

    @property
    def save_s(self) -> float:
        return self.write_s + self.upload_s + COMMIT_S

    @property
    def needed_s(self) -> float:
        """From the hook's request to the committed checkpoint: the step under way, then the save."""
        return self.step_s + self.save_s

    @property
    def grace_s(self) -> int:
        """The default grace period: what the stop needs and the margin, rounded up to 10 s."""
        return int(math.ceil((self.needed_s + GRACE_MARGIN_S) / 10) * 10)

    def line(self) -> str:
        return (f"a drained pod saves its step in {self.needed_s:.0f} s (one step {self.step_s:.1f} s, then "
                f"{self.bytes_per_node / 1e9:.1f} GB a node: written {self.write_s:.0f} s, uploaded {self.upload_s:.0f} s)"
                f"; grace period default {self.grace_s} s, {'within' if self.grace_s <= SPOT_NOTICE_S else 'beyond'} "
                f"a spot interruption's {SPOT_NOTICE_S} s")


def checkpoint_bytes(model: ModelShape, lora_rank: int) -> float:
    trained = model.trained_params(lora_rank)
    frozen = model.params if lora_rank else 0
    return (BYTES_PER_TRAINED_PARAM * trained + BYTES_PER_FROZEN_PARAM * frozen) * CHECKPOINT_OVERHEAD


def stop_estimate(model: ModelShape, lora_rank: int, cluster: Cluster, step_s: float) -> StopEstimate:
    per_node = checkpoint_bytes(model, lora_rank) / cluster.nodes
    per_rank = per_node / cluster.gpus_per_node
    upload_rate = min(cluster.gpus_per_node * S3_STREAM_BYTES_PER_S, cluster.inter_node_gbps * 1e9)
    return StopEstimate(per_node, step_s, per_rank / LOCAL_WRITE_BYTES_PER_S, per_node / upload_rate)


def planned_stop(options: dict, configs: dict | None = None) -> StopEstimate | None:
    """The stop estimate of a RayJob's resolved trainer options (planning.auto.resolve_options: with the predicted
    step time), or None where the planner knows the model or the nodes not."""
    from planning.auto import planned
    from training.command_line import options_argv, parse_args

    cfg = parse_args(options_argv(options))
    found = planned(cfg, configs)
    if found is None or cfg.predicted_step_seconds is None:
        return None
    model, cluster = found
    return stop_estimate(model, cfg.lora_rank, cluster, cfg.predicted_step_seconds)
