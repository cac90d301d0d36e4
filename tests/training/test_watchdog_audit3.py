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
