"""training.watchdog, case by case: what for_run hands the hang handler (the dump folder of the attempt, the rank,
the exit's grace), the floor a test sets, the flight recorder named by the backend that records it, and the
test-only hang on the last rank once per run."""

from __future__ import annotations

import types

import pytest

from training import watchdog


@pytest.fixture
def handed(monkeypatch):
    """What for_run's hang handler passes on to dump_and_exit (which would end the process)."""
    calls = []
    monkeypatch.setattr(watchdog, "dump_and_exit", lambda folder, rank, reason, grace_s, before_exit: calls.append(
        (folder, rank, reason, grace_s, before_exit)))
    return calls


@pytest.mark.parametrize("predicted, bound, grace", [
    (None, 300.0, 10.0),  # the grace is EXIT_GRACE_S (10 s) ...
    (None, None, 10.0),  # ... under the 60 s floor too
    (0.1, 4.0, 4.0),  # ... and the bound itself when that is shorter (a test's short bound keeps its wait short)
])
def test_a_hang_dumps_into_the_attempts_folder_and_waits_the_grace_before_the_exit(tmp_path, monkeypatch, handed,
                                                                                  predicted, bound, grace):
    monkeypatch.delenv(watchdog.FLOOR_ENV, raising=False)
    finish = object()
    dog = watchdog.for_run(f"{tmp_path}/run", "20261206T170000Z", 3, predicted_step_s=predicted, bound_s=bound,
                           before_exit=finish)
    dog.stop()
    dog._on_hang("no progress")
    assert handed == [(f"{tmp_path}/run/hang-dumps/20261206T170000Z", 3, "no progress", grace, finish)]


def test_a_tests_floor_bounds_a_run_without_a_set_bound(tmp_path, monkeypatch, handed):
    """TRAINER_TEST_WATCHDOG_FLOOR_S=2: a predicted 0.1 s step gets max(10 x 0.1, 2) = 2 s, not the 60 s floor; a
    run without a prediction measures its bound against 2 s, and its exit waits 2 s, not 10."""
    monkeypatch.setenv(watchdog.FLOOR_ENV, "2")
    predicted = watchdog.for_run(str(tmp_path), "a", 0, predicted_step_s=0.1)
    measured = watchdog.for_run(str(tmp_path), "a", 0, predicted_step_s=None)
    predicted.stop(), measured.stop()
    assert (predicted.bound_s, measured.bound_s, measured.floor_s) == (2.0, None, 2.0)
    measured._on_hang("no progress")
    assert handed[0][3] == 2.0


@pytest.mark.parametrize("backend, name", [("nccl", "nccl"), ("cpu:gloo,cuda:nccl", "nccl"), ("gloo", "gloo")])
def test_the_flight_recorder_is_dumped_by_its_backends_own_call(monkeypatch, backend, name):
    """A process group for both devices is named "cpu:gloo,cuda:nccl" (torch.distributed.get_backend): its
    collectives run on NCCL, whose recorder _dump_nccl_trace dumps; gloo's is _dump_fr_trace's."""
    import torch
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda: backend)
    monkeypatch.setattr(torch._C._distributed_c10d, "_dump_nccl_trace", lambda: b"nccl trace", raising=False)
    monkeypatch.setattr(torch._C._distributed_c10d, "_dump_fr_trace", lambda: b"gloo trace", raising=False)
    assert watchdog.flight_recorder_trace() == (name, f"{name} trace".encode())


def test_the_test_hang_blocks_the_last_rank_once_per_run(tmp_path, monkeypatch):
    """TRAINER_TEST_HANG_AT_STEP=3 on 2 workers: rank 1 blocks at step 3, not at step 2, not rank 0, and not again
    when the retry trains step 3 (else the recovery it exercises would never finish)."""
    blocked = []

    class Event:
        def wait(self):
            blocked.append(current)

    monkeypatch.setenv(watchdog.HANG_AT_STEP_ENV, "3")
    monkeypatch.setattr(watchdog, "threading", types.SimpleNamespace(Event=Event))
    for current in [(2, 1), (3, 0), (3, 1), (3, 1)]:
        watchdog.maybe_hang(*current, world=2, run_uri=str(tmp_path))
    assert blocked == [(3, 1)]
