"""More of training/train.py's driver side (fit, main) with Ray Train's TorchTrainer replaced by a recorder: where
the workers run (GPU or CPU), what Ray Train is handed, and what main prints and returns."""

from __future__ import annotations

import json
import types

import pytest

from training import train
from training.config import ConfigError, TrainConfig


@pytest.fixture
def handed(monkeypatch) -> dict:
    """What fit hands TorchTrainer; a cluster with `handed["gpus"]` GPUs (0 unless a test sets it); rank 0 returns
    `handed["returned"]`."""
    import ray
    import ray.train.torch

    seen = {"gpus": 0, "returned": {"step": 2, "world_size": 2, "tokens_per_s_per_gpu": 10.0}}

    def trainer(train_func, **kwargs):
        seen.update(kwargs, train_func=train_func)
        return types.SimpleNamespace(fit=lambda: types.SimpleNamespace(return_value=seen["returned"]))

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0} | ({"GPU": float(seen["gpus"])} if seen["gpus"] else {}))
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", trainer)
    monkeypatch.setattr(ray.train, "DataConfig", lambda **kwargs: kwargs)  # what fit asks of Ray Data
    return seen


def _cfg(tmp_path, **changes) -> TrainConfig:
    return TrainConfig(**({"data": "random", "workers": 2, "storage_path": str(tmp_path), "run_name": "r"} | changes))


@pytest.mark.parametrize("gpus, gpu, use_gpu", [
    (0, None, False), (1, None, True), (8, None, True),  # as the cluster has them
    (8, False, False),  # --no-gpu on a GPU cluster: CPU workers
])
def test_the_workers_use_gpus_where_the_cluster_has_them_unless_told_not_to(tmp_path, handed, gpus, gpu, use_gpu):
    handed["gpus"] = gpus
    train.fit(_cfg(tmp_path, gpu=gpu))
    scaling = handed["scaling_config"]
    assert (scaling.num_workers, scaling.use_gpu) == (2, use_gpu)
    # A CPU worker asks Ray for one CPU; a GPU worker for its GPU (Ray Train's default), no CPU bound of ours.
    assert scaling.resources_per_worker == (None if use_gpu else {"CPU": 1})


def test_fp8_on_a_cluster_without_gpus_is_refused_in_one_line_before_training(tmp_path, handed):
    with pytest.raises(ConfigError, match=r"^--precision: fp8 needs a GPU with FP8 tensor cores; this Ray cluster has "
                                          r"no GPU: use --precision bf16$"):
        train.fit(_cfg(tmp_path, precision="fp8"))
    assert "scaling_config" not in handed


def test_ray_train_gets_the_run_name_the_storage_and_every_worker_reading_whole_datasets(tmp_path, handed):
    train.fit(_cfg(tmp_path))
    run = handed["run_config"]
    assert (run.name, run.storage_path) == ("r", str(tmp_path))
    assert handed["datasets"] is None  # synthetic data: no Ray Dataset
    assert handed["dataset_config"] == {"datasets_to_split": []}  # each worker keeps its share (training.data_plan)
    assert handed["train_func"] is train.train_func


def test_fit_returns_the_summary_of_rank_0s_return_value(tmp_path, handed):
    summary = train.fit(_cfg(tmp_path))
    assert (summary["final_step"], summary["tokens_per_s_total"]) == (2, 20.0)
    assert json.loads((tmp_path / "r" / "run_summary.json").read_text())["final_step"] == 2


def test_main_prints_the_summary_without_settings_or_loss_history(monkeypatch, capsys):
    monkeypatch.setattr(train, "fit", lambda cfg: {"final_step": 2, "settings": {"lr": 1}, "loss_history": [1]})
    assert train.main(["--model", "tiny", "--workers", "2", "--local", "--data", "random"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == 'run summary: {"final_step": 2}'


def test_a_refusal_only_the_cluster_can_make_is_one_line_and_exit_2(monkeypatch, capsys):
    def refuse(cfg):
        raise ConfigError("--precision: fp8 needs a GPU")

    monkeypatch.setattr(train, "fit", refuse)
    assert train.main(["--model", "tiny", "--workers", "2", "--local", "--data", "random"]) == 2
    assert capsys.readouterr().err == "error: --precision: fp8 needs a GPU\n"
