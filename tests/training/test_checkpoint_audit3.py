"""Cases of training.checkpoint at the edges of the commit protocol: a rank that waits for rank 0's commit marker
gives up in words at its deadline, and retiring never deletes the only (partial) copy of a run's progress."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from training import checkpoint as ckpt
from training.storage import COMMIT, TRAIN_STATE

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP saves alone, in one process


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(ckpt, "COMMIT_POLL_S", 0.01)  # the deadlines here are tenths of a second


def test_a_rank_waiting_for_a_commit_marker_that_never_comes_gives_up_naming_the_checkpoint(tmp_path):
    """Ranks other than 0 wait for rank 0's marker; when rank 0 died before committing, the wait must end at its
    deadline with the checkpoint's URI (settle turns it into the stop line), not hang the rank's stop."""
    uri = str(tmp_path / "checkpoint_00000010_a")
    with pytest.raises(TimeoutError, match=f"^{re.escape(uri)}: no commit marker after 0.05 s$"):
        ckpt.wait_committed(uri, 0.05)


def test_a_rank_waiting_for_a_commit_marker_returns_once_it_is_there(tmp_path):
    folder = tmp_path / "checkpoint_00000010_a"
    folder.mkdir()
    (folder / COMMIT).write_text(json.dumps({"world": 2}))
    ckpt.wait_committed(str(folder), 0.05)  # no TimeoutError


def test_retire_keeps_a_partial_checkpoint_when_no_checkpoint_is_complete(tmp_path):
    """A run whose first save is still arriving (or was cut short) has nothing complete: nothing is deleted, since
    the partial folder may be the save that is about to be committed."""
    partial = tmp_path / "run" / "checkpoint_00000005_a"
    partial.mkdir(parents=True)
    (partial / TRAIN_STATE).write_text(json.dumps({"step": 5, "protocol": "commit marker"}))
    assert ckpt.retire(str(tmp_path / "run")) == []
    assert partial.is_dir()


def test_a_stop_on_another_rank_waits_for_rank_0s_markers_within_one_shared_deadline(tmp_path):
    """A stop with three saves in flight on rank 1, whose uploads are done but whose rank 0 died before committing:
    settle waits for each marker only within what is left of its one deadline (the pod's grace), then names each
    save that was not committed; waiting the full commit allowance per save would outlive the pod."""
    import threading
    import time
    from concurrent.futures import Future

    saves = ckpt.Checkpoints(False, 1, 2, str(tmp_path / "run"), "a", print)
    uploaded = Future()
    uploaded.set_result(None)
    saves.shipments = [ckpt.Shipment(step, str(tmp_path / "run" / f"checkpoint_{step:08d}_a"), uploaded)
                       for step in (10, 20, 30)]
    problems: list[str] = []
    started = time.monotonic()
    settling = threading.Thread(target=lambda: problems.extend(saves.settle(timeout_s=0.3)), daemon=True)
    settling.start()
    settling.join(5)  # a settle that waits the full allowance would still be here: fail, not hang
    assert not settling.is_alive() and time.monotonic() - started < 2.0
    assert [p.split(":")[0] for p in problems] == ["checkpoint of step 10", "checkpoint of step 20",
                                                   "checkpoint of step 30"]
    assert all("not committed within" in p for p in problems)


def test_an_export_given_to_checkpoints_lands_in_the_checkpoints_hf_folder(tmp_path):
    """--export-checkpoints: each checkpoint carries a Hugging Face export in its hf/ folder, uploaded with it."""
    import torch

    exported = []

    def export(model, folder):
        exported.append(model)
        Path(folder).mkdir(parents=True)
        (Path(folder) / "config.json").write_text('{"model_type": "qwen2"}')

    logged: list[str] = []
    model = torch.nn.Linear(2, 2)
    saves = ckpt.Checkpoints(False, 0, 1, str(tmp_path / "run"), "a", logged.append, export=export)
    saves.save(model, torch.optim.AdamW(model.parameters()), step=10, data_position=10)  # a periodic save: not waited
    assert saves.settle(timeout_s=30) == []
    folder = tmp_path / "run" / "checkpoint_00000010_a"
    assert exported == [model]
    assert (folder / "hf" / "config.json").read_text() == '{"model_type": "qwen2"}'
    assert (folder / COMMIT).exists()
    assert logged[0].startswith("export of step 10 into its checkpoint: training paused ")
