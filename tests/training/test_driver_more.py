"""More of training/driver.py: the resume check reads the settings of the run's NEWEST checkpoint (an older one may
have been trained otherwise), and the run summary takes each figure from its own field and the last records."""

from __future__ import annotations

import dataclasses
import json

import pytest

from training import driver
from training.config import ConfigError, TrainConfig
from training.storage import SETTINGS


def _run_with_checkpoints(tmp_path, monkeypatch, settings_by_step: dict[int, TrainConfig | None]) -> TrainConfig:
    """Run `sft` in tmp_path with committed checkpoints of these steps, each with the settings it was trained with
    (None: written before settings.json was kept)."""
    cfg = TrainConfig(storage_path=str(tmp_path), run_name="sft", seed=0)
    uris = []
    for step, settings in sorted(settings_by_step.items()):
        folder = tmp_path / "sft" / f"checkpoint_{step:08d}_a"
        folder.mkdir(parents=True)
        if settings is not None:
            (folder / SETTINGS).write_text(json.dumps(dataclasses.asdict(settings)))
        uris.append((step, str(folder)))
    monkeypatch.setattr("training.storage.complete_checkpoints", lambda uri: uris)
    return cfg


SAME, OTHER = TrainConfig(run_name="sft", seed=0), TrainConfig(run_name="sft", seed=1)


def test_a_resume_is_refused_when_the_newest_checkpoint_was_trained_otherwise(tmp_path, monkeypatch):
    cfg = _run_with_checkpoints(tmp_path, monkeypatch, {3: SAME, 6: OTHER})
    with pytest.raises(ConfigError, match=r"^--run-name sft: its checkpoint at step 6 was trained with other settings "
                                          r"\(--seed 1 -> 0\); resuming would change the model, the data order or the "
                                          r"optimisation: give a new --run-name, or the checkpoint's values$"):
        driver.refuse_changed_resume(cfg)


def test_an_older_checkpoint_trained_otherwise_does_not_refuse_a_resume_from_the_newest(tmp_path, monkeypatch):
    """The resume restores the newest checkpoint (resume_choice): only its settings matter."""
    driver.refuse_changed_resume(_run_with_checkpoints(tmp_path, monkeypatch, {3: OTHER, 6: SAME}))


def test_a_checkpoint_from_before_settings_were_kept_resumes_unchecked(tmp_path, monkeypatch):
    driver.refuse_changed_resume(_run_with_checkpoints(tmp_path, monkeypatch, {3: OTHER, 6: None}))


def test_a_run_without_a_checkpoint_starts_unchecked(tmp_path, monkeypatch):
    driver.refuse_changed_resume(_run_with_checkpoints(tmp_path, monkeypatch, {}))


def _records(tmp_path, records: list[dict]) -> TrainConfig:
    cfg = TrainConfig(storage_path=str(tmp_path), run_name="r")
    (tmp_path / "r").mkdir(exist_ok=True)
    (tmp_path / "r" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return cfg


# Rank 0's return value: every figure distinct, so a figure read from another field shows.
RETURNED = {"step": 3, "resumed_from_step": 0, "tokens_per_s_per_gpu": 1500.0, "world_size": 8, "tflops_per_gpu": 15.0,
            "mfu": 0.124, "peak_mem_gib": 17.5, "checkpoint_stalls_s": [0.4, 0.5], "data_counts": {"tokens": 9},
            "validation_counts": {"rows": 2}, "transport": "EFA (libfabric)", "health": "health gate: passed",
            "sharding": "hybrid"}


def test_the_summary_takes_each_figure_from_rank_0s_own_field(tmp_path, monkeypatch):
    monkeypatch.setattr("training.storage.complete_checkpoints", lambda uri: [])
    summary = driver.write_run_summary(_records(tmp_path, []), dict(RETURNED), started=driver.time.time())
    for name in ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "peak_mem_gib", "checkpoint_stalls_s",
                 "transport", "health", "sharding"):
        assert summary[name] == RETURNED[name], name
    assert summary["tokens_per_s_total"] == 12000.0  # 8 workers x 1,500
    assert (summary["checkpoint"], summary["final_loss"], summary["val_loss"], summary["loss_history"]) == (None, None, None, [])


def test_the_summary_reports_the_last_steps_loss_and_the_last_evaluation_up_to_the_final_step(tmp_path, monkeypatch):
    """Steps 1-3 logged, evaluated at 1 and 2; a record of step 4 left by an attempt killed past its checkpoint and
    retrained since is not the run's. Final loss: step 3's 1.0; validation: step 2's 2.4."""
    monkeypatch.setattr("training.storage.complete_checkpoints", lambda uri: [])
    cfg = _records(tmp_path, [
        {"step": 1, "loss": 3.0, "val_loss": 2.9, "val_ppl": 18.17, "lr": 1e-4, "grad_norm": 0.9},
        {"step": 2, "loss": 2.0, "val_loss": 2.4, "val_ppl": 11.02, "lr": 1e-4, "grad_norm": 0.8},
        {"step": 3, "loss": 1.0, "lr": 1e-5, "grad_norm": 0.7},
        {"step": 4, "loss": 0.5, "val_loss": 0.4, "val_ppl": 1.49, "lr": 1e-5, "grad_norm": 0.6},
    ])
    summary = driver.write_run_summary(cfg, dict(RETURNED), started=driver.time.time())
    assert (summary["final_loss"], summary["val_loss"], summary["val_ppl"]) == (1.0, 2.4, 11.02)
    assert [r["step"] for r in summary["loss_history"]] == [1, 2, 3]
    assert json.loads((tmp_path / "r" / "run_summary.json").read_text())["final_loss"] == 1.0
