"""Fine-tune a causal LM with FSDP2 under Ray Train: `python -m training.train --help`.

The same code runs on a laptop (--local: local Ray, CPU workers over gloo, tiny model), on
one GPU box (--local with GPUs) and on the EKS RayCluster (joins it at address auto).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from training.config import AUTO, SYNTHETIC_DATA, ConfigError, TrainConfig, option_flag, parse_args
from training.inputs import check_hub_positions, check_inputs
from training.metrics import DataCounts, Throughput, datasheet_peak_tflops, model_flops_per_token, peak_memory_gib
from training.storage import storage_uri

NCCL_LOG_ROOT = "/tmp/nccl-logs"


# ---------------------------------------------------------------- inside each worker


def train_func(config: dict) -> dict:
    import socket

    import ray.train

    from training import checkpoint as ckpt
    from training import faults, preemption, tracking, watchdog
    from training.fp8 import after_optimizer_step
    from training.health import gate_for_run, health_line
    from training.records import RecordWriter
    from training.runtime_checks import first_minute_checks
    from training.schedule import lr_at
    from training.step import NonFiniteStep, evaluate, train_step
    from training.storage import ray_checkpoint
    from training.validation_set import fixed_blocks, validation_batches

    cfg = TrainConfig(**config)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Before NCCL's first collective; memlock only where the EFA guard runs (CUDA).
    first_minute_checks(run_uri(cfg), socket.gethostname(), cfg.require_efa and device.type == "cuda")
    attempt = rank0_choice(lambda: time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 10**6 % 1000:03d}Z", rank)
    checkpoints = ckpt.Checkpoints(cfg.async_checkpoint, rank, world, run_uri(cfg), attempt, lambda message: log(rank, message),
                                   settings=dataclasses.asdict(cfg),
                                   export=(lambda m, folder: export_model(cfg, m, rank, folder)) if cfg.export_checkpoints else None)
    hang_watchdog = watchdog.for_run(run_uri(cfg), attempt, rank, cfg.predicted_step_seconds, cfg.watchdog_step_seconds,
                                     before_exit=checkpoints.finish, log=lambda message: log(rank, message))
    stop = preemption.StopRequest()
    preemption.install_sigterm_handler()
    transport = check_transport(cfg, rank) if device.type == "cuda" else "gloo (CPU): no NCCL"
    try:
        health_figures = gate_for_run(cfg, rank, device, lambda message: log(rank, message))
    except BaseException:
        hang_watchdog.stop()  # a failed gate ends the attempt itself: nothing left to watch
        raise

    mesh, sharding = sharding_mesh(cfg, device, rank, world)
    # The newest committed checkpoint in storage (ckpt.resume_choice); partial ones are named with why. Rank 0
    # alone chooses: a commit landing between two ranks' listings would otherwise restore two steps.
    # Its settings were checked on the driver (refuse_changed_resume) before Ray started.
    restored, lines = rank0_choice(lambda: ckpt.resume_choice(run_uri(cfg)), rank)
    for line in lines:
        log(rank, line)
    if restored:
        with ray_checkpoint(restored).as_directory() as folder:
            model, optimizer, step, position = prepare_training(cfg, device, rank, world, mesh, folder)
            counted_before = read_data_counts(Path(folder))
        log(rank, f"resumed from checkpoint at step {step} (data position {position} rows of the global batch)")
    else:
        model, optimizer, step, position = prepare_training(cfg, device, rank, world, mesh)

    resumed_from = step
    counts = DataCounts()
    if restored:
        counts.total |= counted_before  # the summary's data_counts cover the whole run, not the steps since
    rows = faults.RowLog(cfg.run_name, rank, world, attempt)
    rows.started(step, lines)
    batches = rows.tap(hang_watchdog.waited(counts.counted(train_batches(cfg, model.config.vocab_size, rank, world, position))))
    validation, validation_counts = None, None
    if cfg.val_data is not None or cfg.val_fraction > 0:
        blocks, source = rank0_choice(lambda: fixed_blocks(run_uri(cfg), cfg.eval_batches, world, cfg.micro_batch), rank)
        log(rank, f"validation: the first {blocks} blocks of the validation data, {source}")
        validation, validation_counts = validation_batches(cfg, model.config.vocab_size, rank, world, device, blocks)
    peak = cfg.peak_tflops or (datasheet_peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None)
    flops_tok = model_flops_per_token(model, cfg.seq_len)
    throughput = Throughput(cfg.tokens_per_step_per_worker, flops_tok, peak, start_step=step)
    metrics_log = RecordWriter(run_uri(cfg), read_metrics_file(cfg, up_to_step=step)) if rank == 0 else None
    tracker = tracking.start(cfg, run_uri(cfg), rank, resumed_from=step, health=health_line(health_figures),
                             earlier=list(metrics_log.records) if metrics_log else [])
    last = None

    def summary() -> dict:
        return {"step": step, "resumed_from_step": resumed_from, "transport": transport, "world_size": world,
                "sharding": sharding, "checkpoint_stalls_s": [round(x, 3) for x in checkpoints.stalls],
                "data_counts": dict(counts.total), "validation_counts": validation_counts, "health": health_figures,
                **({k: v for k, v in dataclasses.asdict(last).items() if k not in ("step", "steps")} if last else {})}

    def save(at: int, wait: bool) -> None:
        with hang_watchdog.long_phase("checkpoint"):
            checkpoints.save(model, optimizer, at, position, files={DATA_COUNTS_FILE: json.dumps(counts.total)}, wait=wait)
        throughput.reset(at)  # keep checkpoint time out of the next step's throughput
        if metrics_log:
            metrics_log.flush()
        tracker.summary(summary())

    if step >= cfg.steps:
        log(rank, f"the run is complete: its checkpoint is at step {step} of {cfg.steps}; nothing to train")
    preemption.loop_running(True)
    try:
        while step < cfg.steps:
            injected = faults.at_step_start(cfg, step + 1, rank, world, run_uri(cfg), model, checkpoints,
                                            hang_watchdog.long_phase)
            watchdog.maybe_hang(step + 1, rank, world, run_uri(cfg))
            lr = lr_at(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
            try:  # the step's one collective also carries each rank's stop vote (training.preemption)
                result = train_step(model, optimizer, batches, cfg.grad_accum, cfg.grad_clip, lr, device,
                                    keep_weights_gathered=not cfg.reshard_after_forward,
                                    count=lambda: (*counts.drain(), *stop.vote()),
                                    after_update=after_optimizer_step if cfg.precision == "fp8" else None)
            finally:
                if injected:
                    injected.remove()
            step += 1
            hang_watchdog.step_done(step)
            rows.step_done(step)
            position += global_batch_rows(cfg)
            *sums, asked, signalled = result.sums
            counts.add(sums)
            checkpoints.poll()
            evaluating = validation is not None and (step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0))
            if step % cfg.log_every == 0 or step == cfg.steps or evaluating:
                data = counts.take()
                last = throughput.stats(step, cfg.steps, result.loss, lr, result.grad_norm, peak_memory_gib(device),
                                        real_tokens_per_gpu=data["real_tokens"] / world)
                if cfg.data not in SYNTHETIC_DATA:
                    last.padding = 1 - data["real_tokens"] / max(data["tokens"], 1)
                    last.truncated, last.unlearned, last.empty_blocks = data["truncated"], data["unlearned"], data["empty_blocks"]
                if evaluating:
                    with hang_watchdog.long_phase("evaluation"):
                        last.val_loss, _ = evaluate(model, validation, device)
                    last.val_ppl = math.exp(min(last.val_loss, 700.0))
                    throughput.reset(step)  # keep evaluation out of the next step's throughput
                log(rank, last.line())
                log(rank, last.record())
                if metrics_log:
                    metrics_log.add(last.fields())
                tracker.step(last.fields())
            end = preemption.step_end(step, cfg.steps, cfg.checkpoint_every, asked, signalled)
            if end.save:
                save(step, wait=end.wait)
            if asked or signalled:
                stop.answer(f"step {step}")
                why = "SIGTERM to a worker" if signalled else "a pod's preStop hook"
                log(rank, f"stop requested ({why}): the checkpoint of step {step} is committed")
                if end.end_attempt:
                    raise preemption.StopRequested(f"stopped after step {step} on SIGTERM; its checkpoint is committed, "
                                                   "a retry resumes there")
    except NonFiniteStep as error:  # no update was applied, and no checkpoint of this state is written
        with hang_watchdog.long_phase("checkpoint"):
            newest = checkpoints.finish()
        tracker.close(failed=True)
        raise RuntimeError(f"step {step + 1}: {error}; stopped before the update; {newest} "
                           "(lower --lr or check the data)") from None
    except preemption.StopRequested:
        tracker.close(failed=True)  # the retry reopens the same tracking run
        raise
    except BaseException:  # a save in flight still completes: the retry resumes from it
        with hang_watchdog.long_phase("checkpoint"):
            checkpoints.finish()
        tracker.close(failed=True)
        raise
    finally:  # a run stopped by an error keeps its records up to the last good step
        preemption.loop_running(False)
        hang_watchdog.stop()
        if metrics_log:
            metrics_log.close()
    if cfg.export_hf:
        export_model(cfg, model, rank)
    tracker.close(exported=f"{run_uri(cfg)}/hf-export" if cfg.export_hf else None)
    # Rank 0's return value is the run's result (Ray Train V2: Result.return_value); no checkpoint goes through Ray.
    return summary()


def prepare_training(cfg: TrainConfig, device: torch.device, rank: int, world: int, mesh=None,
                     checkpoint: str | Path | None = None):
    """(model, optimizer, step, data position in global rows) of this worker: built fresh, its random
    generators seeded per rank, then, from `checkpoint`, the weights, optimizer state and random state
    restored (resharded onto this run's world size where the checkpoint's differed)."""
    from training import checkpoint as ckpt
    from training.model import build_model
    from training.step import make_optimizer

    model = build_model(cfg, device, rank, world, mesh=mesh)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, device)
    ckpt.seed_rank(cfg.seed, rank)  # after the build: rank 0's initialisation reseeds the global generator
    step, position = 0, 0
    if checkpoint is not None:
        step, position = ckpt.load(checkpoint, model, optimizer, rank)
    return model, optimizer, step, position


def global_batch_rows(cfg: TrainConfig) -> int:
    """Sequences per optimizer step over all workers."""
    return cfg.workers * cfg.micro_batch * cfg.grad_accum


def train_batches(cfg: TrainConfig, vocab_size: int, rank: int, world: int, rows: int):
    """This worker's micro-batches from the global data position `rows` on (sequences of the global batches
    consumed, the same on any world size)."""
    from training.checkpoint import worker_position
    from training.data import synthetic_batches
    from training.data_plan import dataset_batches

    position = worker_position(rows, world, cfg.micro_batch)
    if cfg.data in SYNTHETIC_DATA:
        return synthetic_batches(cfg.data, cfg.seed, vocab_size, cfg.seq_len, cfg.micro_batch, rank, world, position)
    import ray.train

    # The whole stream on every worker (fit: datasets_to_split=[]); each keeps its share (training.data_plan).
    return dataset_batches(ray.train.get_dataset_shard("train"), cfg.micro_batch, position,
                           shuffle_seed=cfg.seed if cfg.shuffle else None, rank=rank, world=world)


DATA_COUNTS_FILE = "data_counts.json"  # beside each checkpoint: the data counted up to its step


def read_data_counts(folder: Path) -> dict[str, int]:
    """The data counted up to a checkpoint's step (none in one written before the counts were kept)."""
    saved = folder / DATA_COUNTS_FILE
    return json.loads(saved.read_text()) if saved.exists() else {}


def rank0_choice(choose, rank: int):
    """What rank 0's `choose()` returns, on every rank (the others never call it)."""
    box = [choose() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def export_model(cfg: TrainConfig, model, rank: int, folder: str | None = None) -> None:
    """The model as a Hugging Face export (training.export) in `folder`, or uploaded to <run>/hf-export.
    Every rank calls it (the weights are gathered); rank 0 writes."""
    from training.export import export_live
    from training.storage import upload_folder

    if folder is not None:
        export_live(model, cfg, folder, rank)
        return
    with tempfile.TemporaryDirectory() as scratch:
        export_live(model, cfg, scratch, rank)
        if rank == 0:
            upload_folder(scratch, f"{run_uri(cfg)}/hf-export")


def log(rank: int, message: str) -> None:
    if rank == 0:
        print(message, flush=True)


def read_metrics_file(cfg: TrainConfig, up_to_step: int) -> list[dict]:
    """The run's step records so far (a resumed run continues its file), without steps past the checkpoint."""
    from training.records import METRICS_FILE, read_metrics
    from training.storage import exists, read_text

    uri = f"{run_uri(cfg)}/{METRICS_FILE}"
    if up_to_step == 0 or not exists(uri):
        return []
    return read_metrics(read_text(uri), up_to_step)


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
    """The device mesh of the run's sharding layout, from where Ray placed the workers."""
    import ray

    from training.model import device_mesh

    node_of_rank: list = [None] * world
    dist.all_gather_object(node_of_rank, ray.get_runtime_context().get_node_id())
    sharding, nodes, per_node, why = choose_layout(cfg, node_of_rank)
    log(rank, f"sharding: {sharding} over {nodes} node(s) x {per_node} worker(s) ({why})")
    return device_mesh(device, sharding, nodes, per_node), sharding


def choose_layout(cfg: TrainConfig, node_of_rank: list) -> tuple[str, int, int, str]:
    """(sharding, nodes, workers per node, why). Full sharding is one flat mesh and takes any placement; only
    hybrid needs every node to hold the same number of consecutive ranks. auto reaches the trainer only on one
    machine (--local; elsewhere the planner resolves it first), where a hybrid mesh would be the same as full."""
    from training.layout import node_layout

    world = len(node_of_rank)
    if cfg.sharding != "hybrid":
        return "full", 1, world, "as set" if cfg.sharding == "full" else "one machine"
    nodes, per_node = node_layout(node_of_rank)
    return "hybrid", nodes, per_node, "as set"


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


def fit(cfg: TrainConfig) -> dict:
    import ray
    from ray.train import DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from training.failures import failure_config_options

    started = time.time()
    if not ray.is_initialized():
        if cfg.local:
            ray.init(num_cpus=cfg.workers + 1, include_dashboard=False, runtime_env=runtime_env(cfg), logging_level="ERROR")
        else:
            ray.init(address="auto", runtime_env=runtime_env(cfg))
    use_gpu = cfg.gpu if cfg.gpu is not None else ray.cluster_resources().get("GPU", 0) >= 1
    if cfg.precision == "fp8" and not use_gpu:
        raise ConfigError("--precision: fp8 needs a GPU with FP8 tensor cores; this Ray cluster has no GPU: "
                          "use --precision bf16")
    datasets = real_datasets(cfg)
    from training import train as importable  # by reference: `python -m` makes this module __main__
    from training.tracking import runtime_env as tracker_packages

    trainer = TorchTrainer(
        importable.train_func,
        train_loop_config=dataclasses.asdict(cfg),
        scaling_config=ScalingConfig(num_workers=cfg.workers, use_gpu=use_gpu,
                                     resources_per_worker=None if use_gpu else {"CPU": 1}),
        run_config=RunConfig(
            name=cfg.run_name, storage_path=storage_uri(cfg.storage_path),
            # Checkpoints are the trainer's own (training.checkpoint: committed, KEEP of them kept); Ray Train
            # is told none, and a restart resumes from storage.
            failure_config=FailureConfig(**failure_config_options(cfg.max_failures, cfg.node_wait_s)),
            worker_runtime_env=tracker_packages(cfg),  # the training workers only: rank 0 logs
        ),
        datasets=datasets or None,
        # Every worker reads whole datasets and keeps its share (training.data_plan): Ray's own split
        # drops blocks (equal=True) and gives each world size other rows.
        dataset_config=DataConfig(datasets_to_split=[]),
    )
    result = trainer.fit()
    from training.storage import complete_checkpoints, write_text

    metrics = dict(result.return_value or {})
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


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        refuse_planner_autos(cfg)
        refuse_changed_resume(cfg)  # before check_inputs: it reads one small file, where check_inputs may load the model's code
        check_inputs(cfg)
        check_hub_positions(cfg)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        summary = fit(cfg)
    except ConfigError as error:  # what only the cluster can tell (auto's plan, its GPUs)
        print(f"error: {error}", file=sys.stderr)
        return 2
    brief = {k: v for k, v in summary.items() if k not in ("settings", "loss_history")}
    print("run summary: " + json.dumps(brief))
    return 0


if __name__ == "__main__":
    sys.exit(main())
