"""How long a run waits for a lost node's replacement: node_wait_s bounds Ray Train's retries of a worker group that
cannot start. The verdicts are Ray 2.58's own DefaultFailurePolicy's, on the errors its controller raises."""

from __future__ import annotations

import pytest

from training.config import TrainConfig
from training.failures import START_TIMEOUT_ENV, controller_failure_limit, failure_config_options


@pytest.mark.parametrize("node_wait_s,timeout_s,limit", [
    (1200, 60.0, 20),   # the RayJob's pre_running_deadline_seconds at Ray's 60 s start timeout: 20 timeouts
    (1230, 60.0, 21),   # a part of a timeout is a whole one
    (1200, 300.0, 4),
    (0, 60.0, 0),       # no wait: the first timeout ends the run
    (-1, 60.0, -1),     # Ray's default: no limit
])
def test_the_wait_is_counted_in_rays_start_timeouts(node_wait_s, timeout_s, limit):
    assert controller_failure_limit(node_wait_s, timeout_s) == limit


def test_the_start_timeout_is_read_where_ray_reads_it(monkeypatch):
    monkeypatch.setenv(START_TIMEOUT_ENV, "300")
    assert failure_config_options(3, 1200) == {"max_failures": 3, "controller_failure_limit": 4}


def _startup_timeouts_until_raise(options: dict, cap: int = 200) -> int | None:
    """How many WorkerGroupStartupTimeoutErrors Ray's failure policy retries before it fails the run (None: never,
    within cap)."""
    from ray.train import FailureConfig
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError
    from ray.train.v2._internal.execution.failure_handling import FailureDecision
    from ray.train.v2._internal.execution.failure_handling.default import DefaultFailurePolicy
    from ray.train.v2.api.exceptions import ControllerError

    policy = DefaultFailurePolicy(FailureConfig(**options))
    for retried in range(cap):
        decision = policy.make_decision(ControllerError(WorkerGroupStartupTimeoutError(num_workers=8)))
        if decision == FailureDecision.RAISE:
            return retried
    return None


def test_ray_retries_a_worker_group_that_cannot_start_without_end_unless_bounded(monkeypatch):
    monkeypatch.delenv(START_TIMEOUT_ENV, raising=False)
    assert _startup_timeouts_until_raise({"max_failures": 3}) is None  # Ray's default: the nodes left bill on
    assert _startup_timeouts_until_raise(failure_config_options(3, 1200)) == 20


def test_the_trainer_hands_ray_the_bounded_failure_config(monkeypatch):
    """fit() builds Ray's FailureConfig from --max-failures and --node-wait-s (stopped where Ray would start)."""
    import ray
    import ray.train.torch

    from training import train

    seen = {}

    class Stop(Exception):
        pass

    def trainer(*args, run_config, **kwargs):
        seen["failure"] = run_config.failure_config
        raise Stop

    monkeypatch.delenv(START_TIMEOUT_ENV, raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", trainer)
    with pytest.raises(Stop):
        train.fit(TrainConfig(data="random", gpu=False, max_failures=2, node_wait_s=600, storage_path="/tmp/unused"))
    assert (seen["failure"].max_failures, seen["failure"].controller_failure_limit) == (2, 10)
