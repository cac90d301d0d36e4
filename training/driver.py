"""The driver's side of a run, around Ray Train's TorchTrainer.fit (training.train.fit): the refusals before Ray
starts, Ray's start and the runtime environment every worker starts with, the datasets Ray Data streams to the
workers, and the run summary written at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from training.config import AUTO, SYNTHETIC_DATA, ConfigError, TrainConfig, option_flag
from training.worker import nccl_log_dir, read_metrics_file, run_uri


def refuse_planner_autos(cfg: TrainConfig) -> None:
    """auto that only the planner resolves is refused before anything starts, in one line naming the CLI that
    resolves it; --sharding auto on one machine (--local) is full and needs no planner."""
    planner_only = [n for n in ("micro_batch", "activation_checkpointing", "precision") if getattr(cfg, n) == AUTO]
    if cfg.sharding == AUTO and not cfg.local:
        planner_only.append("sharding")
    if planner_only:
        flags = " and ".join(option_flag(n) for n in planner_only)
        raise ConfigError(f"{option_flag(planner_only[0])}: auto needs the planner: run python -m planning.train with "
                          f"the same options, or set {flags}")


def refuse_changed_resume(cfg: TrainConfig) -> None:
    """On the driver, before Ray starts: ConfigError (one line) when the run's newest checkpoint was trained with
    settings that change the model, the data order or the optimisation (training.config.RESUME_SETTINGS and the
    global batch); resuming would silently train something else. The world size may change."""
    from training.config import resume_changes
    from training.storage import SETTINGS, complete_checkpoints, exists, read_text

    found = complete_checkpoints(run_uri(cfg))
    if not found:
        return
    step, uri = found[-1]
    if not exists(f"{uri}/{SETTINGS}"):  # written beside checkpoints since settings.json exists; older ones cannot be checked
        return
    changed = resume_changes(json.loads(read_text(f"{uri}/{SETTINGS}")), dataclasses.asdict(cfg))
    if changed:
        raise ConfigError(f"--run-name {cfg.run_name}: its checkpoint at step {step} was trained with other settings "
                          f"({'; '.join(changed)}); resuming would change the model, the data order or the "
                          "optimisation: give a new --run-name, or the checkpoint's values")


def start_ray(cfg: TrainConfig) -> None:
    """Join the cluster (address auto), or start a local Ray (--local: a CPU per worker and one for the driver);
    a Ray already started in this process is used as it is. Every worker starts with the job's runtime_env."""
    import ray

    if not ray.is_initialized():
        if cfg.local:
            ray.init(num_cpus=cfg.workers + 1, include_dashboard=False, runtime_env=runtime_env(cfg), logging_level="ERROR")
        else:
            ray.init(address="auto", runtime_env=runtime_env(cfg))


def runtime_env(cfg: TrainConfig) -> dict:
    """The job's Ray runtime environment: every worker process on every node starts with it."""
    return {"env_vars": worker_env(cfg), "worker_process_setup_hook": prepare_worker_process}


def worker_env(cfg: TrainConfig) -> dict[str, str]:
    """Environment every worker starts with: NCCL reads it when its first communicator starts.

    PYTHONPATH: Ray runs the setup hook before it adds the driver's folder to a worker's sys.path,
    so the trainer must be importable from the start (on the pods it is the ConfigMap's mount).
    """
    trainer_root = str(Path(__file__).resolve().parent.parent)
    paths = [trainer_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != trainer_root]
    from training import faults, preemption, watchdog

    env = {"TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.pathsep.join(paths), **watchdog.WORKER_ENV}
    passed = (watchdog.HANG_AT_STEP_ENV, watchdog.FLOOR_ENV, preemption.STOP_DIR_ENV, *faults.WORKER_ENV_NAMES)
    env |= {name: os.environ[name] for name in passed if name in os.environ}
    if cfg.require_efa:
        env |= {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": f"{nccl_log_dir(cfg)}/%h.%p.log"}
    return env


def prepare_worker_process() -> None:
    """Runs first in every Ray worker process, on every node (runtime_env worker_process_setup_hook).

    NCCL opens NCCL_DEBUG_FILE when it initialises and, if its folder is missing, logs to stdout
    instead; the folder made by the driver exists only on the driver's node.
    """
    target = os.environ.get("NCCL_DEBUG_FILE")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)


def real_datasets(cfg: TrainConfig) -> dict:
    """Ray Datasets of packed blocks for "train" and, where asked, "validation"; none for synthetic data."""
    if cfg.data in SYNTHETIC_DATA:
        return {}
    from training.data import DataFormat, chat_template_text, packed_dataset

    fmt = DataFormat(text_field=cfg.text_field, messages_field=cfg.messages_field,
                     prompt_fields=tuple(cfg.prompt_field.split(",")) if cfg.prompt_field else (),
                     response_field=cfg.response_field, assistant_only_loss=cfg.assistant_only_loss,
                     chat_template=chat_template_text(cfg.chat_template, cfg.cache_dir) if cfg.chat_template else None,
                     default_system_prompt=cfg.default_system_prompt)
    common = {"tokenizer_path": cfg.model, "seq_len": cfg.seq_len, "fmt": fmt, "cache_dir": cfg.cache_dir,
              "revision": cfg.model_revision}
    datasets = {"train": packed_dataset(cfg.data, part="train", val_fraction=cfg.val_fraction,
                                        shuffle_seed=cfg.seed if cfg.shuffle else None, **common)}
    # Validation is shuffled too: --eval-batches may read only part of it, which must not be a file's head.
    if cfg.val_data is not None:
        datasets["validation"] = packed_dataset(cfg.val_data, shuffle_seed=cfg.seed if cfg.shuffle else None, **common)
    elif cfg.val_fraction > 0:
        datasets["validation"] = packed_dataset(cfg.data, part="validation", val_fraction=cfg.val_fraction,
                                                shuffle_seed=cfg.seed if cfg.shuffle else None, **common)
    return datasets


def write_run_summary(cfg: TrainConfig, metrics: dict, started: float) -> dict:
    """The run's summary, from rank 0's return value (`metrics`) and the step records, written to
    <run>/run_summary.json; `started` is when the driver started (time.time())."""
    from training.storage import complete_checkpoints, write_text

    records = read_metrics_file(cfg, up_to_step=metrics.get("step") or 0)
    evaluated = [r for r in records if r.get("val_loss") is not None]
    summary = {
        "run": run_uri(cfg),
        "settings": dataclasses.asdict(cfg),
        "wall_time_s": round(time.time() - started, 1),
        "final_step": metrics.get("step"),
        "resumed_from_step": metrics.get("resumed_from_step"),
        "final_loss": records[-1]["loss"] if records else None,
        "val_loss": evaluated[-1]["val_loss"] if evaluated else None,
        "val_ppl": evaluated[-1]["val_ppl"] if evaluated else None,
        "tokens_per_s_per_gpu": metrics.get("tokens_per_s_per_gpu"),
        "tokens_per_s_total": (metrics.get("tokens_per_s_per_gpu") or 0) * (metrics.get("world_size") or 0),
        "tflops_per_gpu": metrics.get("tflops_per_gpu"),
        "mfu": metrics.get("mfu"),
        "peak_mem_gib": metrics.get("peak_mem_gib"),
        "checkpoint_stalls_s": metrics.get("checkpoint_stalls_s"),
        "data_counts": metrics.get("data_counts"),
        "validation_counts": metrics.get("validation_counts"),
        "transport": metrics.get("transport"),
        "health": metrics.get("health"),
        "sharding": metrics.get("sharding"),
        "checkpoint": newest[-1][1] if (newest := complete_checkpoints(run_uri(cfg))) else None,
        "loss_history": [{k: r.get(k) for k in ("step", "loss", "val_loss", "lr", "grad_norm")} for r in records],
    }
    write_text(f"{run_uri(cfg)}/run_summary.json", json.dumps(summary, indent=1))
    return summary
