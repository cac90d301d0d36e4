"""Which checkpoint an export takes: candidates of different steps, so the newest is told from the others."""

from __future__ import annotations

import json

import training.export as export
import training.storage as storage
from training.config import TrainConfig


def test_without_a_step_the_export_takes_the_newest_checkpoint(tmp_path, monkeypatch):
    found = []
    for step in (10, 20, 30):  # run_checkpoints' order: oldest first
        folder = tmp_path / f"checkpoint_{step:06d}"
        folder.mkdir()
        (folder / storage.SETTINGS).write_text(json.dumps(TrainConfig(model="tiny").__dict__))
        found.append((step, str(folder)))
    read, uploaded = [], []
    monkeypatch.setattr(export, "run_checkpoints", lambda run: found)
    monkeypatch.setattr(export, "checkpoint_model_state", lambda folder: read.append(folder) or {})
    monkeypatch.setattr(export, "write_export", lambda state, cfg, folder: None)
    monkeypatch.setattr(storage, "upload_folder", lambda folder, target: uploaded.append(target))
    assert export.export_checkpoint(str(tmp_path), None, None) == (30, f"{tmp_path}/hf-export-step-30")
    assert read == [str(tmp_path / "checkpoint_000030")] and uploaded == [f"{tmp_path}/hf-export-step-30"]
