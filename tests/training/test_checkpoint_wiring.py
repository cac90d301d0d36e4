"""training.checkpoint's wiring: what rank 0 writes beside a checkpoint is the run's settings AND the files given
to save() (the data counts), each alone and both together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training import checkpoint as ckpt
from training.storage import COMMIT, SETTINGS, TRAIN_STATE

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP saves alone, in one process


def _linear():
    import torch

    model = torch.nn.Linear(2, 2)
    return model, torch.optim.AdamW(model.parameters())


@pytest.mark.parametrize("settings, files, expected", [
    ({"lr": 0.1}, {"data_counts.json": '{"documents": 3}'}, {SETTINGS: '{"lr": 0.1}', "data_counts.json": '{"documents": 3}'}),
    ({"lr": 0.1}, None, {SETTINGS: '{"lr": 0.1}'}),
    (None, {"data_counts.json": '{"documents": 3}'}, {"data_counts.json": '{"documents": 3}'}),
])
def test_rank_0_writes_the_settings_and_every_file_given_to_save_into_the_checkpoint(tmp_path, settings, files, expected):
    # The export reads the settings and a resume reads the data counts from the same checkpoint: neither may
    # push the other out.
    run = tmp_path / "run"
    ckpt.Checkpoints(False, 0, 1, str(run), "a", print, settings=settings).save(
        *_linear(), step=10, data_position=10, files=files, wait=True)
    folder = run / "checkpoint_00000010_a"
    beside = {p.name: json.loads(p.read_text()) for p in folder.glob("*.json") if p.name not in (TRAIN_STATE, COMMIT)}
    assert beside == {name: json.loads(text) for name, text in expected.items()}


def test_only_rank_0_writes_the_settings_and_files(tmp_path):
    """Every worker saves; two writing the same file into storage would race (and rank 1 holds no counts of its own)."""
    run = tmp_path / "run"
    uploaded: list[set[str]] = []

    def upload(local: str, uri: str) -> None:
        uploaded.append({p.name for p in Path(local).iterdir()})

    saves = ckpt.Checkpoints(False, 1, 2, str(run), "a", print, settings={"lr": 0.1}, upload=upload)
    saves.save(*_linear(), step=10, data_position=10, files={"data_counts.json": "{}"})
    saves.shipments[0].done.result(timeout=30)
    assert uploaded and not uploaded[0] & {SETTINGS, "data_counts.json"}
