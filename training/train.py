"""Fine-tune a causal LM with FSDP2 under Ray Train: `python -m training.train --help`.

The same code runs on a laptop (--local: local Ray, CPU workers over gloo, tiny model), on
one GPU box (--local with GPUs) and on the EKS RayCluster (joins it at address auto).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

from training.command_line import parse_args
from training.config import SYNTHETIC_DATA, ConfigError, TrainConfig
from training.driver import real_datasets, refuse_changed_resume, refuse_planner_autos, start_ray, write_run_summary
from training.inputs import check_hub_positions, check_inputs
from training.metrics import (DataCounts, Throughput, datasheet_peak_tflops, model_flops_per_token, peak_memory_gib,
                              step_record)
from training.storage import storage_uri
from training.worker import (DATA_COUNTS_FILE, check_transport, export_model, data_position, log, prepare_training,
                             rank0_choice, read_data_counts, run_records, run_uri, sharding_mesh, train_batches)


# ---------------------------------------------------------------- inside each worker


def train_func(config: dict) -> dict:
    """Ray Train's entry on each worker: what Ray gives it (its rank, the world size, its device), handed to
    run_worker."""
    import ray.train

    context = ray.train.get_context()
    return run_worker(TrainConfig(**config), context.get_world_rank(), context.get_world_size(),
                      ray.train.torch.get_device())


def run_worker(cfg: TrainConfig, rank: int, world: int, device: torch.device) -> dict:
    """One worker's whole attempt, in a process group already started: restore or build, train, save, export.
    Rank 0's return value is the run summary."""
    import socket

    from training import checkpoint as ckpt
    from training import faults, preemption, watchdog
    from training.fp8 import after_optimizer_step
    from training.health import gate_for_run, health_line
    from training.runtime_checks import first_minute_checks
    from training.schedule import lr_at, step_output
    from training.step import NonFiniteStep, evaluate, train_step
    from training.storage import ray_checkpoint
    from training.validation_set import fixed_blocks, validation_batches

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
            model, optimizer, step, start_position = prepare_training(cfg, device, rank, world, mesh, folder)
            counted_before = read_data_counts(Path(folder))
        log(rank, f"resumed from checkpoint at step {step} (data position {start_position} rows of the global batch)")
    else:
        model, optimizer, step, start_position = prepare_training(cfg, device, rank, world, mesh)

    resumed_from = step
    counts = DataCounts()
    if restored:
        counts.total |= counted_before  # the summary's data_counts cover the whole run, not the steps since
    rows = faults.RowLog(cfg.run_name, rank, world, attempt)
    rows.started(step, lines)
    batches = rows.tap(hang_watchdog.waited(counts.counted(train_batches(cfg, model.config.vocab_size, rank, world, start_position))))
    validation, validation_counts = None, None
    if cfg.val_data is not None or cfg.val_fraction > 0:
        blocks, source = rank0_choice(lambda: fixed_blocks(run_uri(cfg), cfg.eval_batches, world, cfg.micro_batch), rank)
        log(rank, f"validation: the first {blocks} blocks of the validation data, {source}")
        validation, validation_counts = validation_batches(cfg, model.config.vocab_size, rank, world, device, blocks)
    peak = cfg.peak_tflops or (datasheet_peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None)
    flops_tok = model_flops_per_token(model, cfg.seq_len)
    throughput = Throughput(cfg.tokens_per_step_per_worker, flops_tok, peak, start_step=step)
    metrics_log, tracker = run_records(cfg, rank, step, health_line(health_figures))
    last = None

    def summary() -> dict:
        return {"step": step, "resumed_from_step": resumed_from, "transport": transport, "world_size": world,
                "sharding": sharding, "checkpoint_stalls_s": [round(x, 3) for x in checkpoints.stalls],
                "data_counts": dict(counts.total), "validation_counts": validation_counts, "health": health_figures,
                **({k: v for k, v in dataclasses.asdict(last).items() if k not in ("step", "steps")} if last else {})}

    def save(at: int, wait: bool) -> None:
        with hang_watchdog.long_phase("checkpoint"):
            checkpoints.save(model, optimizer, at, data_position(cfg, at, resumed_from, start_position),
                             files={DATA_COUNTS_FILE: json.dumps(counts.total)}, wait=wait)
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
            *sums, asked, signalled = result.sums
            counts.add(sums)
            checkpoints.poll()
            recording, evaluating = step_output(step, cfg.steps, cfg.log_every, cfg.eval_every, validation is not None)
            if recording:
                last = step_record(throughput, step, cfg.steps, result.loss, lr, result.grad_norm, peak_memory_gib(device),
                                   counts.take(), world, counted=cfg.data not in SYNTHETIC_DATA)
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


# ---------------------------------------------------------------- the driver


def fit(cfg: TrainConfig) -> dict:
    import ray
    from ray.train import DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from training.failures import failure_config_options

    started = time.time()
    start_ray(cfg)
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
    return write_run_summary(cfg, dict(result.return_value or {}), started)


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
