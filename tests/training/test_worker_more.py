"""More of training/worker.py: what rank 0's and another rank's records start from on a resumed run."""

from __future__ import annotations

import json

import pytest

from training import tracking, worker
from training.config import TrainConfig


@pytest.fixture
def resumed_at_4(tmp_path, monkeypatch) -> tuple[TrainConfig, list]:
    """Run `r` logged steps 1-6 and was killed; its checkpoint is step 4. Records what tracking.start is handed."""
    cfg = TrainConfig(storage_path=str(tmp_path), run_name="r")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 7.0 - s}) + "\n" for s in range(1, 7)))
    handed = []
    monkeypatch.setattr(tracking, "start", lambda cfg, run_uri, rank, resumed_from, health, earlier=(): handed.append(
        {"rank": rank, "resumed_from": resumed_from, "earlier": [r["step"] for r in earlier]}) or tracking.Tracker())
    return cfg, handed


def test_rank_0_continues_the_metrics_file_and_hands_its_tracker_the_steps_up_to_the_checkpoint(resumed_at_4):
    """The tracker sends what it lacks of steps 1-4 (a rank 0 that died had not sent them all); 5 and 6 are
    retrained and logged anew, so they are neither kept nor handed over."""
    cfg, handed = resumed_at_4
    metrics_log, _ = worker.run_records(cfg, 0, 4, None)
    metrics_log.close()
    assert [r["step"] for r in metrics_log.records] == [1, 2, 3, 4]
    assert handed == [{"rank": 0, "resumed_from": 4, "earlier": [1, 2, 3, 4]}]


def test_another_rank_keeps_no_metrics_file_and_hands_its_tracker_nothing(resumed_at_4):
    cfg, handed = resumed_at_4
    metrics_log, _ = worker.run_records(cfg, 1, 4, None)
    assert metrics_log is None
    assert handed == [{"rank": 1, "resumed_from": 4, "earlier": []}]
