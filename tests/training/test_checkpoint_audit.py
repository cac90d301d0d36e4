"""training.checkpoint.read_train_state on the checkpoints written before positions were counted in global rows."""

from __future__ import annotations

import json

import pytest

from training.checkpoint import read_train_state


@pytest.mark.parametrize("train_state, position", [
    # Written per worker (no data_unit): 10 micro-batches of each of 2 workers x 4 sequences = 80 global rows.
    ({"step": 5, "data_position": 10}, 80),
    ({"step": 5, "data_position": 80, "data_unit": "global rows"}, 80),  # already global rows: as written
])
def test_an_older_checkpoints_per_worker_position_is_read_as_global_rows(tmp_path, train_state, position):
    (tmp_path / "train_state.json").write_text(json.dumps(train_state))
    (tmp_path / "settings.json").write_text(json.dumps({"workers": 2, "micro_batch": 4}))
    assert read_train_state(tmp_path) == (5, position)


def test_settle_shares_one_deadline_among_every_pending_save(tmp_path):
    """The hang watchdog and a stop settle within the grace period: three saves that never finish get one timeout
    between them, not one each (three timeouts would run past the pod's grace and lose the whole attempt's report)."""
    import time
    from concurrent.futures import Future

    from training import checkpoint as ckpt

    saves = ckpt.Checkpoints(False, 0, 1, str(tmp_path / "run"), "a", print)
    saves.shipments = [ckpt.Shipment(step, str(tmp_path / "run" / str(step)), Future()) for step in (10, 20, 30)]
    started = time.monotonic()
    problems = saves.settle(timeout_s=0.4)
    assert time.monotonic() - started < 1.0  # one deadline: 0.4 s; one each: at least 1.2 s
    assert [p.split(":")[0] for p in problems] == ["checkpoint of step 10", "checkpoint of step 20",
                                                   "checkpoint of step 30"]
    assert saves.shipments == []
