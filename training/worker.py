"""What each training worker does around its loop (training.train.train_func): build or restore the model and
optimizer, place it on a device mesh, prove the NCCL transport, feed its share of the data, log, export.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from training.config import SYNTHETIC_DATA, TrainConfig
from training.storage import storage_uri

NCCL_LOG_ROOT = "/tmp/nccl-logs"


def run_uri(cfg: TrainConfig) -> str:
    return f"{storage_uri(cfg.storage_path)}/{cfg.run_name}"


def log(rank: int, message: str) -> None:
    if rank == 0:
        print(message, flush=True)


def rank0_choice(choose, rank: int):
    """What rank 0's `choose()` returns, on every rank (the others never call it)."""
    box = [choose() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


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


def nccl_log_dir(cfg: TrainConfig) -> Path:
    return Path(NCCL_LOG_ROOT) / cfg.run_name


def own_nccl_log(cfg: TrainConfig) -> Path | None:
    """This process's NCCL_DEBUG_FILE (NCCL expands %h to the host and %p to the process id)."""
    found = sorted(nccl_log_dir(cfg).glob(f"*.{os.getpid()}.log"))
    return found[0] if found else None


def global_batch_rows(cfg: TrainConfig) -> int:
    """Sequences per optimizer step over all workers."""
    return cfg.workers * cfg.micro_batch * cfg.grad_accum


def data_position(cfg: TrainConfig, step: int, start_step: int, start_position: int) -> int:
    """The data position (sequences of the global batches consumed) once `step` is trained, in an attempt that
    started at `start_step` and `start_position`: what the checkpoint of `step` records, so that a resume from it
    trains the rows of step + 1 next, none twice."""
    return start_position + (step - start_step) * global_batch_rows(cfg)


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


def read_metrics_file(cfg: TrainConfig, up_to_step: int) -> list[dict]:
    """The run's step records so far (a resumed run continues its file), without steps past the checkpoint."""
    from training.records import METRICS_FILE, read_metrics
    from training.storage import exists, read_text

    uri = f"{run_uri(cfg)}/{METRICS_FILE}"
    if up_to_step == 0 or not exists(uri):
        return []
    return read_metrics(read_text(uri), up_to_step)


def run_records(cfg: TrainConfig, rank: int, step: int, health: str | None):
    """(rank 0's metrics file, continued from the run's records up to the checkpoint at `step`, or None on another
    rank; this rank's tracker). The tracker gets those earlier records too: it sends what it lacks of them, the
    steps a rank 0 that died had not sent yet."""
    from training import tracking
    from training.records import RecordWriter

    metrics_log = RecordWriter(run_uri(cfg), read_metrics_file(cfg, up_to_step=step)) if rank == 0 else None
    tracker = tracking.start(cfg, run_uri(cfg), rank, resumed_from=step, health=health,
                             earlier=list(metrics_log.records) if metrics_log else [])
    return metrics_log, tracker


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
