"""A tracker closed twice (the loop's end, then the worker's finally on an error after it) ends its tracking run
once, with the first close's status: the second must not queue a FAILED end behind a FINISHED one that a slow
tracker has not sent yet (both would go out in one batch, the last one winning)."""

from __future__ import annotations

import threading

from tests.training.test_tracking_cases import Backend
from training import tracking
from training.config import TrainConfig


class SlowBackend(Backend):
    """A tracker that answers only once released: the first close gives up waiting while the end is still queued."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.released = threading.Event()

    def open(self, run_uri: str) -> int:
        self.released.wait(10)
        return 0


def test_a_second_close_sends_nothing_and_keeps_the_first_status(monkeypatch):
    backends = []
    monkeypatch.setattr(tracking, "_Mlflow", lambda *args: backends.append(SlowBackend()) or backends[-1])
    monkeypatch.setattr(tracking, "CLOSE_TIMEOUT_S", 0.05)
    logged = []
    tracker = tracking.start(TrainConfig(tracking="mlflow", mlflow_tracking_uri="http://mlflow:5000"),
                             "s3://bucket/runs/r", 0, resumed_from=0, health=None, log=logged.append)
    tracker.close(exported="s3://bucket/runs/r/hf-export")  # gives up after 0.05 s: the end is still queued
    tracker.close(failed=True)
    backends[0].released.set()
    tracker._thread.join(10)
    assert [value for kind, value in backends[0].sent if kind == "end"] == [
        ("FINISHED", {"export": "s3://bucket/runs/r/hf-export"})]
    assert len(logged) == 1  # the first close's "not sent" line only
