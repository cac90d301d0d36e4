"""Sharded checkpoints with torch.distributed.checkpoint: model, optimizer, step, data position.

Each worker writes its own shard files into a local folder; Ray Train uploads every worker's
folder into one checkpoint directory of the storage path, which then holds a complete DCP
checkpoint (rank 0 adds the .metadata file and train_state.json; storage.checkpoint_complete
checks that every rank's files arrived), and every rank's random state (rng-rank<r>.pt).

A checkpoint resumes on any number of workers: DCP reshards the FSDP2 model and the AdamW state
onto the new mesh when it loads them, and the data position is global, in rows (sequences) of the
global batch, which does not depend on the world size (training.config: --batch-tokens).

Saving does not stall training (AsyncSaver): DCP copies the shards to CPU memory, which is the
only pause, then writes them from a background thread while the next steps run; Ray uploads the
folder in the background too once every rank has written it.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from training.fp8 import plain_tensors
from training.storage import SETTINGS, TRAIN_STATE

# train_state.json's data_unit: positions written before it were each worker's micro-batches.
GLOBAL_ROWS = "global rows"


def seed_rank(seed: int, rank: int) -> None:
    """Seed this rank's random generators (torch CPU and CUDA, Python, numpy) with seed + rank.

    What draws from them differs per rank (LoRA dropout on each rank's own sequences), so the ranks get
    different streams, each reproducible. Nothing that must agree across ranks draws from them: the
    initial weights come from rank 0 (training.model), and the data order has its own seeded generators."""
    import numpy as np

    torch.manual_seed(seed + rank)  # every CUDA device too
    random.seed(seed + rank)
    np.random.seed(seed + rank)


def rng_file(rank: int) -> str:
    return f"rng-rank{rank}.pt"


def rng_state() -> dict:
    import numpy as np

    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save_rng(folder: str | Path, rank: int) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)  # before DCP, which would make it
    torch.save(rng_state(), Path(folder) / rng_file(rank))


def worker_position(rows: int, world: int, micro_batch: int) -> int:
    """The micro-batches each of `world` workers has consumed when the global batches have consumed `rows`
    sequences: worker micro-step m holds global rows m*W*B ... (m+1)*W*B - 1 (training.data), so the
    position is whole exactly when `rows` is whole global batches of any world size."""
    per_micro_step = world * micro_batch
    if rows % per_micro_step:
        raise ValueError(f"data position {rows} rows is not a whole number of micro-steps of {world} workers x "
                         f"{micro_batch} sequences")
    return rows // per_micro_step


def _state(model, optimizer) -> dict:
    """What DCP saves and loads into: plain tensors sharing the model's and optimizer's storage (an fp8 run's
    weights unwrapped from torchao's float8 wrapper), so any run, bf16 or fp8, with or without torchao, reads it."""
    model_state, optim_state = get_state_dict(model, optimizer)
    return plain_tensors({"model": model_state, "optim": optim_state})


def write_train_state(folder: str | Path, step: int, data_position: int) -> None:
    """data_position: the sequences (rows) of global batches consumed."""
    (Path(folder) / TRAIN_STATE).write_text(json.dumps({"step": step, "data_position": data_position,
                                                        "data_unit": GLOBAL_ROWS}))


def save(folder: str | Path, model, optimizer, step: int, data_position: int, rank: int) -> None:
    """Synchronous save: every rank waits until its shards are on disk. data_position: global rows consumed."""
    save_rng(folder, rank)
    dcp.save(_state(model, optimizer), checkpoint_id=str(folder))
    if rank == 0:
        write_train_state(folder, step, data_position)


def load(folder: str | Path, model, optimizer, rank: int | None = None) -> tuple[int, int]:
    """Restore in place, on this run's world size whatever the checkpoint's; returns (step, data_position in
    global rows). With `rank`, that rank's random state too, where the checkpoint holds one (a rank beyond
    the checkpoint's world keeps its seed_rank stream)."""
    state = _state(model, optimizer)
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    rng = Path(folder) / rng_file(rank if rank is not None else -1)
    if rng.exists():
        restore_rng(torch.load(rng, weights_only=False))
    return read_train_state(folder)


def read_train_state(folder: str | Path) -> tuple[int, int]:
    """(step, data_position in global rows); a position written per worker is converted with the run's settings."""
    train_state = json.loads((Path(folder) / TRAIN_STATE).read_text())
    step, position = int(train_state["step"]), int(train_state["data_position"])
    if train_state.get("data_unit") != GLOBAL_ROWS:
        settings = json.loads((Path(folder) / SETTINGS).read_text())
        position *= settings["workers"] * settings["micro_batch"]
    return step, position


@dataclass
class PendingCheckpoint:
    folder: str
    step: int
    future: object
    started: float
    stall_s: float
    """How long training paused for it: the copy of this rank's shards to CPU memory."""


class AsyncSaver:
    """DCP asynchronous saves, one in flight at a time.

    The background writes coordinate over their own gloo group, and the "has every rank finished
    writing?" question over another, so neither can interleave with the training's collectives
    (torchtitan does the same).
    """

    def __init__(self) -> None:
        from torch.distributed.checkpoint import FileSystemWriter

        self._write_group = dist.new_group(backend="gloo")
        self._poll_group = dist.new_group(backend="gloo")
        # One writer for the run: on GPU it keeps the staging copy in pinned CPU memory between
        # checkpoints, so only the first pays for allocating it (docs/benchmarks.md).
        self._writer = FileSystemWriter(tempfile.gettempdir(), cache_staged_state_dict=torch.cuda.is_available())
        self.pending: PendingCheckpoint | None = None

    def start(self, folder: str, model, optimizer, step: int, data_position: int, rank: int) -> PendingCheckpoint:
        assert self.pending is None, "finish the previous checkpoint first"
        started = time.perf_counter()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        save_rng(folder, rank)  # this step's state, before the next step draws from it
        future = dcp.async_save(_state(model, optimizer), checkpoint_id=folder, storage_writer=self._writer,
                                process_group=self._write_group)
        if rank == 0:
            write_train_state(folder, step, data_position)
        self.pending = PendingCheckpoint(folder, step, future, started, time.perf_counter() - started)
        return self.pending

    def written_everywhere(self) -> bool:
        """Whether every rank's background write is done (one tiny CPU all-reduce; no GPU sync)."""
        if self.pending is None:
            return False
        done = torch.tensor([1 if self.pending.future.done() else 0])
        dist.all_reduce(done, op=dist.ReduceOp.MIN, group=self._poll_group)
        return bool(done.item())

    def finish(self) -> tuple[PendingCheckpoint, float]:
        """Wait for this rank's write (raising its error, if any); returns it and the seconds waited."""
        pending, self.pending = self.pending, None
        waited = time.perf_counter()
        pending.future.result()
        return pending, time.perf_counter() - waited


class Checkpoints:
    """The run's checkpoints, as the training loop sees them: save() at a checkpoint step, poll()
    after every step. A checkpoint goes to `report(step, folder, final)` (Ray Train) once every
    rank has written it: at once when saving synchronously, after the background write otherwise;
    the last one is always waited for. `stalls` holds how long each save paused training.

    Rank 0 writes the run's `settings` beside each checkpoint (what training.export needs);
    `export(model, folder)`, when given, puts a Hugging Face export in the checkpoint's hf/ folder
    (every rank calls it: it gathers the weights)."""

    def __init__(self, background: bool, rank: int, report, log, settings: dict | None = None, export=None) -> None:
        self.saver = AsyncSaver() if background else None
        self.rank, self.report, self.log = rank, report, log
        self.settings, self.export = settings, export
        self.stalls: list[float] = []

    def save(self, model, optimizer, step: int, data_position: int, final: bool) -> None:
        folder = tempfile.mkdtemp(prefix=f"checkpoint-{step}-")  # Ray deletes it once uploaded
        if self.rank == 0 and self.settings is not None:
            (Path(folder) / SETTINGS).write_text(json.dumps(self.settings))
        if self.export:
            started = time.perf_counter()
            self.export(model, f"{folder}/hf")
            self.log(f"export of step {step} into its checkpoint: training paused {time.perf_counter() - started:.1f} s")
        if self.saver is None:
            started = time.perf_counter()
            save(folder, model, optimizer, step, data_position, self.rank)
            self.stalls.append(time.perf_counter() - started)
            self.report(step, folder, True)
            return
        if self.saver.pending:
            self._hand_over(final=False)
        self.stalls.append(self.saver.start(folder, model, optimizer, step, data_position, self.rank).stall_s)
        if final:
            self._hand_over(final=True)

    def poll(self) -> None:
        """Hand the background checkpoint over as soon as every rank has written it."""
        if self.saver and self.saver.pending and self.saver.written_everywhere():
            self._hand_over(final=False)

    def _hand_over(self, final: bool) -> None:
        pending, waited = self.saver.finish()
        self.log(f"checkpoint of step {pending.step}: training paused {pending.stall_s:.2f} s to stage it, "
                 f"written in the background in {time.perf_counter() - pending.started:.1f} s"
                 + (f" (waited {waited:.1f} s for it)" if waited > 0.05 else ""))
        self.report(pending.step, pending.folder, final)
