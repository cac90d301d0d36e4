"""How a run rides through lost nodes: Ray Train's FailureConfig from the trainer's options.

Ray Train 2.58 keeps three budgets (ray/train/v2/_internal/execution/failure_handling/default.py):
- max_failures: worker-group errors, a worker that raised or died;
- max_preemption_failures: a worker whose node was drained for preemption (Ray's SIGTERM handler drains the node
  with DRAIN_NODE_REASON_PREEMPTION, ray/_private/node.py), unlimited by default;
- controller_failure_limit: the controller's retryable errors, unlimited by default. One of them is
  WorkerGroupStartupTimeoutError, which a (re)start raises after waiting RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S
  (60 s by default) for its workers' resources (worker_group.py), and which the controller retries.

So after a node is lost, the restart waits for a replacement 60 s at a time without end, and the nodes still there
bill until the RayJob's activeDeadlineSeconds. node_wait_s bounds that wait: once Ray has waited that long in all,
the run fails, and KubeRay's backoffLimit starts a fresh cluster (which its preRunningDeadlineSeconds bounds).
"""

from __future__ import annotations

import math
import os

# ray/train/v2/_internal/constants.py (Ray 2.58): the variable and its default, read as Ray reads them.
START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
DEFAULT_START_TIMEOUT_S = 60.0


def start_timeout_s() -> float:
    return float(os.environ.get(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT_S))


def controller_failure_limit(node_wait_s: int, timeout_s: float) -> int:
    """The startup timeouts of timeout_s each that node_wait_s covers, rounded up; -1 (Ray's: no limit) for -1."""
    if node_wait_s < 0:
        return -1
    return math.ceil(node_wait_s / timeout_s)


def failure_config_options(max_failures: int, node_wait_s: int) -> dict:
    """ray.train.FailureConfig's keyword arguments."""
    return {"max_failures": max_failures,
            "controller_failure_limit": controller_failure_limit(node_wait_s, start_timeout_s())}
