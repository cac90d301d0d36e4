"""Cases of training/driver.py that the other tests hold on one side only: each auto the planner alone resolves,
what every worker's environment carries, which source and side each Ray Dataset reads, and the run summary's
figures that come from rank 0's return value."""

from __future__ import annotations

import json
import os

import pytest

from training import driver, faults, preemption, watchdog
from training.config import ConfigError, TrainConfig


@pytest.mark.parametrize("option", ["micro_batch", "activation_checkpointing", "precision"])
def test_each_auto_only_the_planner_resolves_is_refused_alone(option):
    flag = "--" + option.replace("_", "-")
    cfg = TrainConfig(sharding="full", batch_tokens=65536, **{option: "auto"})
    with pytest.raises(ConfigError, match=f"^{flag}: auto needs the planner: .* or set {flag}$"):
        driver.refuse_planner_autos(cfg)


def test_a_local_ray_has_a_cpu_for_each_worker_and_one_for_the_driver(monkeypatch):
    import ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    driver.start_ray(TrainConfig(workers=3, local=True))
    assert calls[0]["num_cpus"] == 4


def test_a_ray_already_started_in_this_process_is_used_as_it_is(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "init", lambda **kwargs: pytest.fail("ray.init called twice"))
    driver.start_ray(TrainConfig(local=True))


@pytest.mark.parametrize("name", [watchdog.HANG_AT_STEP_ENV, watchdog.FLOOR_ENV, preemption.STOP_DIR_ENV,
                                  *faults.WORKER_ENV_NAMES])
def test_each_test_and_stop_variable_of_the_driver_reaches_the_workers(monkeypatch, name):
    monkeypatch.setenv(name, "7")
    assert driver.worker_env(TrainConfig())[name] == "7"


def test_every_worker_gets_the_flight_recorder_buffer_quiet_tokenizers_and_the_trainer_first_on_its_path(monkeypatch):
    root = str(driver.Path(driver.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/opt/lib", root]))
    env = driver.worker_env(TrainConfig())
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000" and env["TOKENIZERS_PARALLELISM"] == "false"
    assert env["PYTHONPATH"] == os.pathsep.join([root, "/opt/lib"])  # once, first
    assert "NCCL_DEBUG" not in env


def test_the_setup_hook_makes_the_nccl_files_folder_not_a_folder_named_for_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG_FILE", f"{tmp_path}/logs/%h.%p.log")
    driver.prepare_worker_process()
    assert (tmp_path / "logs").is_dir() and not (tmp_path / "logs" / "%h.%p.log").exists()


@pytest.fixture
def datasets_built(monkeypatch) -> list[dict]:
    built = []
    monkeypatch.setattr("training.data.packed_dataset", lambda path, **kwargs: built.append({"path": path} | kwargs) or path)
    monkeypatch.setattr("training.data.chat_template_text", lambda source, cache_dir=None: f"<{source} {cache_dir}>")
    return built


SFT = {"model": "o/m", "data": "/x/train.jsonl", "seed": 5, "model_revision": "v1", "cache_dir": "/cache",
       "prompt_field": "instruction,input", "response_field": "output", "chat_template": "/x/t.jinja",
       "assistant_only_loss": False, "default_system_prompt": False}


def test_a_held_out_fraction_is_left_out_of_the_train_side_and_is_the_validation_side(datasets_built):
    datasets = driver.real_datasets(TrainConfig(**SFT, val_fraction=0.1))
    assert datasets == {"train": "/x/train.jsonl", "validation": "/x/train.jsonl"}
    train, validation = datasets_built
    assert (train["part"], train["val_fraction"], train["shuffle_seed"]) == ("train", 0.1, 5)
    assert (validation["part"], validation["val_fraction"], validation["shuffle_seed"]) == ("validation", 0.1, 5)
    fmt = train["fmt"]
    assert (fmt.prompt_fields, fmt.response_field, fmt.assistant_only_loss, fmt.default_system_prompt) == (
        ("instruction", "input"), "output", False, False)
    assert fmt.chat_template == "</x/t.jinja /cache>"
    assert (train["tokenizer_path"], train["revision"], train["cache_dir"], train["seq_len"]) == ("o/m", "v1", "/cache", 512)


def test_validation_data_of_its_own_is_read_whole_and_the_train_data_whole(datasets_built):
    datasets = driver.real_datasets(TrainConfig(**SFT, val_data="/x/val.jsonl", shuffle=False))
    assert datasets == {"train": "/x/train.jsonl", "validation": "/x/val.jsonl"}
    train, validation = datasets_built
    assert train["val_fraction"] == 0.0 and validation.get("part", "train") == "train"
    assert train["shuffle_seed"] is None and validation["shuffle_seed"] is None  # --no-shuffle: file order


def test_no_validation_dataset_without_validation_data(datasets_built):
    assert list(driver.real_datasets(TrainConfig(**SFT))) == ["train"]


def test_the_summary_totals_throughput_over_the_workers_and_names_the_newest_checkpoint(tmp_path, monkeypatch):
    """Started 100 s ago. 4 workers at 1,500 tokens/s each: 6,000 in all. Checkpoints at steps 4 and 8: the summary names step 8's."""
    monkeypatch.setattr("training.storage.complete_checkpoints", lambda uri: [(4, f"{uri}/ckpt-4"), (8, f"{uri}/ckpt-8")])
    cfg = TrainConfig(storage_path=str(tmp_path), run_name="r")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text(json.dumps({"step": 8, "loss": 2.0, "val_loss": 2.5, "val_ppl": 12.18, "lr": 1e-4,
                                                              "grad_norm": 0.5, "tokens": 9}) + "\n")
    summary = driver.write_run_summary(cfg, {"step": 8, "resumed_from_step": 4, "tokens_per_s_per_gpu": 1500.0,
                                             "world_size": 4, "data_counts": {"rows": 1}, "validation_counts": {"rows": 2}},
                                       started=driver.time.time() - 100.0)
    assert 100.0 <= summary["wall_time_s"] < 160.0  # since the driver started, not since 1970
    assert summary["tokens_per_s_total"] == 6000.0 and summary["checkpoint"] == f"{tmp_path}/r/ckpt-8"
    assert (summary["final_step"], summary["resumed_from_step"]) == (8, 4)
    assert (summary["data_counts"], summary["validation_counts"]) == ({"rows": 1}, {"rows": 2})
    assert summary["loss_history"] == [{"step": 8, "loss": 2.0, "val_loss": 2.5, "lr": 1e-4, "grad_norm": 0.5}]
