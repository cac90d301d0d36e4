"""A tracker closed twice (the loop's end, then the worker's finally on an error after it) ends its tracking run
once, with the first close's status: the second must not turn a FINISHED run into FAILED or send a second end."""

from __future__ import annotations

from tests.training.test_tracking_cases import Backend
from training import tracking
from training.config import TrainConfig


def test_a_second_close_sends_nothing_and_keeps_the_first_status(monkeypatch):
    backends = []
    monkeypatch.setattr(tracking, "_Mlflow", lambda *args: backends.append(Backend()) or backends[-1])
    logged = []
    tracker = tracking.start(TrainConfig(tracking="mlflow", mlflow_tracking_uri="http://mlflow:5000"),
                             "s3://bucket/runs/r", 0, resumed_from=0, health=None, log=logged.append)
    tracker.close(exported="s3://bucket/runs/r/hf-export")
    tracker.close(failed=True)
    assert [value for kind, value in backends[0].sent if kind == "end"] == [
        ("FINISHED", {"export": "s3://bucket/runs/r/hf-export"})]
    assert logged == []
