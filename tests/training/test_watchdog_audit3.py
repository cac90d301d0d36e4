"""Cases of training.watchdog off the fast path: the started watch thread fires once and ends, and a dump writes
the flight recorder's trace beside the stacks when the process group has one."""

from __future__ import annotations

from training import watchdog


def test_the_started_watch_fires_once_when_overdue_and_its_thread_ends(tmp_path):
    """The thread is what ends a hung rank: a watch that never calls on_hang, or calls it on every poll, breaks it."""
    fired = []
    now = [0.0]
    dog = watchdog.Watchdog(5.0, fired.append, clock=lambda: now[0], long_s=5.0)
    dog.start(poll_s=0.005)
    now[0] = 6.0  # past the first step's allowance of 5 s
    dog._thread.join(5)
    assert not dog._thread.is_alive()
    assert fired == ["no progress for 6 s waiting for the first step (bound 5 s)"]


def test_a_dump_writes_the_flight_recorder_trace_beside_the_stacks(tmp_path, monkeypatch):
    monkeypatch.setattr(watchdog, "flight_recorder_trace", lambda: ("nccl", b"pickled trace"))
    written = watchdog.dump(str(tmp_path / "dumps"), 3, "no progress")
    assert written == [f"{tmp_path}/dumps/rank3-stacks.txt", f"{tmp_path}/dumps/rank3-nccl-trace.pkl"]
    assert (tmp_path / "dumps" / "rank3-nccl-trace.pkl").read_bytes() == b"pickled trace"
    assert (tmp_path / "dumps" / "rank3-stacks.txt").read_text().startswith("rank 3: no progress\n\n")


def test_without_a_plan_the_bound_is_measured_after_steps_2_to_4_and_not_before():
    """MEASURED_STEPS = 3 timed steps after the first (docstring: 'the slowest of steps 2-4'): steps of 1, 2 and
    5 s (floor 30 s) give max(30, 10 x 5) = 50 s only once step 4 is done; after step 3 the first-step allowance holds."""
    now = [0.0]
    dog = watchdog.Watchdog(None, lambda reason: None, clock=lambda: now[0], long_s=1800.0, floor_s=30.0)
    for step, seconds in ((1, 100.0), (2, 1.0), (3, 2.0)):
        now[0] += seconds
        dog.step_done(step)
    assert dog.bound_s is None  # two timed steps: still measuring
    now[0] += 5.0
    dog.step_done(4)
    assert dog.bound_s == 50.0  # max(30 s floor, 10 x 5 s)
