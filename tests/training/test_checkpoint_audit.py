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
