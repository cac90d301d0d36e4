"""training.train.fit's wiring into Ray Train, with TorchTrainer replaced by a recorder: the Ray Datasets the driver
builds and the tracker's packages for the workers are what TorchTrainer gets."""

from __future__ import annotations

import types

import pytest

from training import train
from training.config import TrainConfig


@pytest.fixture
def handed(monkeypatch) -> dict:
    """What fit hands TorchTrainer, on a CPU cluster."""
    import ray
    import ray.train.torch

    seen: dict = {}

    def trainer(train_func, **kwargs):
        seen.update(kwargs)
        return types.SimpleNamespace(fit=lambda: types.SimpleNamespace(return_value={"step": 1}))

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0})
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", trainer)
    return seen


def _cfg(tmp_path) -> TrainConfig:
    return TrainConfig(data="random", workers=2, storage_path=str(tmp_path), run_name="r")


def test_the_datasets_the_driver_builds_are_handed_to_ray_train(tmp_path, handed, monkeypatch):
    built = {"train": "<train dataset>", "validation": "<validation dataset>"}
    monkeypatch.setattr(train, "real_datasets", lambda cfg: built)
    train.fit(_cfg(tmp_path))
    assert handed["datasets"] == built


def test_the_training_workers_get_the_trackers_packages_as_their_runtime_env(tmp_path, handed, monkeypatch):
    # The cluster image has neither MLflow nor W&B: without them rank 0's tracker cannot start.
    packages = {"pip": {"packages": ["mlflow-skinny==3.0.0"], "pip_check": False}}
    monkeypatch.setattr("training.tracking.runtime_env", lambda cfg: packages)
    train.fit(_cfg(tmp_path))
    assert handed["run_config"].worker_runtime_env == packages
