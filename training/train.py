"""Fine-tune a causal LM with FSDP2 under Ray Train: `python -m training.train --help`.

The same code runs on a laptop (--local: local Ray, CPU workers over gloo, tiny model), on
one GPU box (--local with GPUs) and on the EKS RayCluster (joins it at address auto).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from training.config import SYNTHETIC_DATA, ConfigError, TrainConfig, check_inputs, parse_args
from training.metrics import Throughput, datasheet_peak_tflops, model_flops_per_token, peak_memory_gib

NCCL_LOG_ROOT = "/tmp/nccl-logs"


# ---------------------------------------------------------------- inside each worker


def train_func(config: dict) -> None:
    import ray.train

    from training import checkpoint as ckpt
    from training.data import dataset_batches, synthetic_batches
    from training.model import build_model
    from training.step import NonFiniteStep, lr_at, make_optimizer, train_step

    cfg = TrainConfig(**config)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    transport = check_transport(cfg, rank) if device.type == "cuda" else "gloo (CPU): no NCCL"

    mesh, sharding = sharding_mesh(cfg, device, rank, world)
    model = build_model(cfg, device, rank, world, mesh=mesh)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, device)
    step, position = 0, 0
    from training.storage import latest_checkpoint

    # Ray restores within one fit(); a rerun after a crash finds the checkpoint itself.
    restored = ray.train.get_checkpoint() or latest_checkpoint(run_uri(cfg))
    if restored:
        with restored.as_directory() as folder:
            step, position = ckpt.load(folder, model, optimizer)
        log(rank, f"resumed from checkpoint at step {step} (data position {position})")

    if cfg.data in SYNTHETIC_DATA:
        batches = synthetic_batches(cfg.data, cfg.seed, model.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world, position)
    else:
        batches = dataset_batches(ray.train.get_dataset_shard("train"), cfg.micro_batch, position)

    peak = cfg.peak_tflops or (datasheet_peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None)
    flops_tok = model_flops_per_token(model, cfg.seq_len)
    throughput = Throughput(cfg.tokens_per_step_per_worker, flops_tok, peak, start_step=step)
    records = read_records(cfg, up_to_step=step) if rank == 0 else []
    history: list[dict] = []
    last = None
    if step >= cfg.steps:
        log(rank, f"the run is complete: its checkpoint is at step {step} of {cfg.steps}; nothing to train")
    while step < cfg.steps:
        maybe_inject_failure(cfg, step + 1, rank, world)
        lr = lr_at(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
        injected = maybe_inject_nan(cfg, step + 1, rank, model)
        try:
            loss, grad_norm = train_step(model, optimizer, batches, cfg.grad_accum, cfg.grad_clip, lr, device,
                                         keep_weights_gathered=not cfg.reshard_after_forward)
        except NonFiniteStep as error:
            # Stop here: no update was applied, and no checkpoint of this state is written.
            raise RuntimeError(f"step {step + 1}: {error}; stopped before the update, the newest checkpoint "
                               f"is untouched (lower --lr or check the data)") from None
        finally:
            if injected:
                injected.remove()
        step += 1
        position += cfg.grad_accum
        if step % cfg.log_every == 0 or step == cfg.steps:
            dist.all_reduce(loss)  # the mean over workers; also the host sync of this step
            last = throughput.stats(step, cfg.steps, loss.item() / world, lr, float(grad_norm), peak_memory_gib(device))
            history.append({"step": step, "loss": last.loss, "lr": lr, "grad_norm": last.grad_norm})
            records.append(last.record())
            log(rank, last.line())
            log(rank, last.record())
        if step == cfg.steps or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
            # The history rides on the last report only: Ray Train logs every report in full.
            metrics = {"step": step, "transport": transport, "world_size": world, "sharding": sharding,
                       **({"loss_history": history} if step == cfg.steps else {}),
                       **({k: v for k, v in dataclasses.asdict(last).items() if k not in ("step", "steps")} if last else {})}
            with tempfile.TemporaryDirectory() as folder:
                ckpt.save(folder, model, optimizer, step, position, rank)
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
            if rank == 0:
                write_records(cfg, records)
            throughput.reset(step)  # keep checkpoint time out of the next step's throughput
    if cfg.export_hf:
        with tempfile.TemporaryDirectory() as folder:
            ckpt.export_hf(model, model.config, folder, rank)
            if rank == 0:
                from training.storage import upload_folder

                upload_folder(folder, f"{run_uri(cfg)}/hf-export")


def log(rank: int, message: str) -> None:
    if rank == 0:
        print(message, flush=True)


METRICS_FILE = "metrics.jsonl"


def read_records(cfg: TrainConfig, up_to_step: int) -> list[str]:
    """The run's step records so far (a resumed run continues its file), without steps past the checkpoint."""
    from training.records import RECORD_PREFIX, parse_record
    from training.storage import exists, read_text

    uri = f"{run_uri(cfg)}/{METRICS_FILE}"
    if up_to_step == 0 or not exists(uri):
        return []
    kept = []
    for line in read_text(uri).splitlines():
        record = parse_record(RECORD_PREFIX + line)
        if record and record["step"] <= up_to_step:
            kept.append(RECORD_PREFIX + line)
    return kept


def write_records(cfg: TrainConfig, records: list[str]) -> None:
    """metrics.jsonl beside the checkpoints: one JSON object per logged step."""
    from training.records import RECORD_PREFIX
    from training.storage import write_text

    write_text(f"{run_uri(cfg)}/{METRICS_FILE}", "".join(r.removeprefix(RECORD_PREFIX) + "\n" for r in records))


def maybe_inject_nan(cfg: TrainConfig, step: int, rank: int, model: torch.nn.Module):
    """Testing the non-finite guard: rank 0's loss becomes NaN at the given step (a hook to remove)."""
    if cfg.inject_nan_at_step != step or rank != 0:
        return None
    return model.register_forward_hook(lambda module, args, output: output * float("nan"))


def maybe_inject_failure(cfg: TrainConfig, step: int, rank: int, world: int) -> None:
    """Testing recovery: the last rank's worker dies once, at the start of the given step."""
    if cfg.inject_failure_at_step != step or rank != world - 1:
        return
    from training.storage import exists, write_text

    marker = f"{run_uri(cfg)}/.injected-failure"
    if exists(marker):
        return
    write_text(marker, str(step))
    print(f"injecting a worker failure at step {step} (rank {rank})", flush=True)
    os._exit(1)


def check_transport(cfg: TrainConfig, rank: int) -> str:
    """Run one collective, gather every rank's reading of its own NCCL log, and stop the job when
    EFA is required and not proven (training.transport.decide)."""
    import socket

    from training.transport import decide, rank_report

    probe = torch.ones(1, device="cuda")
    dist.all_reduce(probe)
    torch.cuda.synchronize()
    dist.barrier()
    report = rank_report(rank, socket.gethostname(), own_nccl_log(cfg))
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, report)
    if not cfg.require_efa:
        line = "not checked (NCCL logs are collected with --require-efa)"
    else:
        ok, line = decide(gathered, cfg.require_efa)
        if not ok:
            log(rank, f"NCCL transport: FAIL: {line}")
            raise RuntimeError(f"--require-efa: {line}")
    log(rank, f"NCCL transport: {line}")
    return line


def sharding_mesh(cfg: TrainConfig, device: torch.device, rank: int, world: int):
    """The device mesh of the run's sharding layout, from where Ray placed the workers (training.plan)."""
    import ray

    from training.hardware import gpu_for_device_name
    from training.model import device_mesh, model_config
    from training.plan import Workload, node_layout, resolve_sharding, shape_of

    node_of_rank: list = [None] * world
    dist.all_gather_object(node_of_rank, ray.get_runtime_context().get_node_id())
    nodes, per_node = node_layout(node_of_rank)
    work = Workload(seq_len=cfg.seq_len, micro_batch=cfg.micro_batch, grad_accum=cfg.grad_accum,
                    activation_checkpointing=cfg.activation_checkpointing, loss_chunk_tokens=cfg.loss_chunk_tokens,
                    steps=cfg.steps)
    gpu = gpu_for_device_name(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    sharding, why = resolve_sharding(cfg.sharding, shape_of(model_config(cfg)), work, nodes, per_node, gpu,
                                     cfg.instance_type, not cfg.reshard_after_forward, cfg.reduce_dtype)
    log(rank, f"sharding: {sharding} over {nodes} node(s) x {per_node} worker(s) ({why})")
    return device_mesh(device, sharding, nodes, per_node), sharding


def nccl_log_dir(cfg: TrainConfig) -> Path:
    return Path(NCCL_LOG_ROOT) / cfg.run_name


def own_nccl_log(cfg: TrainConfig) -> Path | None:
    """This process's NCCL_DEBUG_FILE (NCCL expands %h to the host and %p to the process id)."""
    found = sorted(nccl_log_dir(cfg).glob(f"*.{os.getpid()}.log"))
    return found[0] if found else None


def prepare_worker_process() -> None:
    """Runs first in every Ray worker process, on every node (runtime_env worker_process_setup_hook).

    NCCL opens NCCL_DEBUG_FILE when it initialises and, if its folder is missing, logs to stdout
    instead; the folder made by the driver exists only on the driver's node.
    """
    target = os.environ.get("NCCL_DEBUG_FILE")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------- the driver


def run_uri(cfg: TrainConfig) -> str:
    return f"{storage_uri(cfg.storage_path)}/{cfg.run_name}"


def storage_uri(path: str) -> str:
    return path.rstrip("/") if "://" in path else str(Path(path).expanduser().resolve())


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
    env = {"TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.pathsep.join(paths)}
    if cfg.require_efa:
        env |= {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": f"{nccl_log_dir(cfg)}/%h.%p.log"}
    return env


def fit(cfg: TrainConfig) -> dict:
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    started = time.time()
    if not ray.is_initialized():
        if cfg.local:
            ray.init(num_cpus=cfg.workers + 1, include_dashboard=False, runtime_env=runtime_env(cfg), logging_level="ERROR")
        else:
            ray.init(address="auto", runtime_env=runtime_env(cfg))
    use_gpu = cfg.gpu if cfg.gpu is not None else ray.cluster_resources().get("GPU", 0) >= 1
    datasets = {}
    if cfg.data not in SYNTHETIC_DATA:
        from training.data import read_text_dataset

        datasets["train"] = read_text_dataset(cfg.data, cfg.model, cfg.seq_len, cfg.text_field, cfg.cache_dir,
                                              cfg.model_revision)
    from training import train as importable  # by reference: `python -m` makes this module __main__

    trainer = TorchTrainer(
        importable.train_func,
        train_loop_config=dataclasses.asdict(cfg),
        scaling_config=ScalingConfig(num_workers=cfg.workers, use_gpu=use_gpu,
                                     resources_per_worker=None if use_gpu else {"CPU": 1}),
        run_config=RunConfig(
            name=cfg.run_name, storage_path=storage_uri(cfg.storage_path),
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
        datasets=datasets or None,
    )
    result = trainer.fit()
    metrics = dict(result.metrics or {})
    summary = {
        "run": run_uri(cfg),
        "settings": dataclasses.asdict(cfg),
        "wall_time_s": round(time.time() - started, 1),
        "final_step": metrics.get("step"),
        "final_loss": (metrics.get("loss_history") or [{}])[-1].get("loss"),
        "tokens_per_s_per_gpu": metrics.get("tokens_per_s_per_gpu"),
        "tokens_per_s_total": (metrics.get("tokens_per_s_per_gpu") or 0) * (metrics.get("world_size") or 0),
        "tflops_per_gpu": metrics.get("tflops_per_gpu"),
        "mfu": metrics.get("mfu"),
        "peak_mem_gib": metrics.get("peak_mem_gib"),
        "transport": metrics.get("transport"),
        "sharding": metrics.get("sharding"),
        "checkpoint": result.checkpoint.path if result.checkpoint else None,
        "loss_history": metrics.get("loss_history"),
    }
    from training.storage import write_text

    write_text(f"{run_uri(cfg)}/run_summary.json", json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        check_inputs(cfg)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = fit(cfg)
    brief = {k: v for k, v in summary.items() if k not in ("settings", "loss_history")}
    print("run summary: " + json.dumps(brief))
    return 0


if __name__ == "__main__":
    sys.exit(main())
