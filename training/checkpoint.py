"""Sharded checkpoints with torch.distributed.checkpoint: model, optimizer, step, data position.

Each worker writes its own shard files and random state (rng-rank<r>.pt) into a local folder and uploads
that folder into the checkpoint's one folder in the run's storage (local or s3://); rank 0's folder also
holds DCP's .metadata, train_state.json and settings.json. Once every rank's files are in storage, verified
against DCP's .metadata (storage.missing_files), rank 0 writes the commit marker (storage.COMMIT) last: only
a committed checkpoint is resumed from (storage.checkpoint_status), so a save cut off anywhere (a worker
killed, a write refused, a pod gone) is never half-resumed, and is named with why at the next start.

A checkpoint resumes on any number of workers: DCP reshards the FSDP2 model and the AdamW state
onto the new mesh when it loads them, and the data position is global, in rows (sequences) of the
global batch, which does not depend on the world size (training.config: --batch-tokens).

Saving does not stall training (AsyncSaver): DCP copies the shards to CPU memory, which is the
only pause, then writes them from a background thread while the next steps run; the upload and the
commit follow in another background thread (Checkpoints), which needs nothing from the training loop,
so a save in flight when the loop stops still completes (Checkpoints.finish).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from training.fp8 import plain_tensors
from training.storage import COMMIT_PROTOCOL, SETTINGS, TRAIN_STATE, rng_file

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


def write_train_state(folder: str | Path, step: int, data_position: int, world: int | None = None) -> None:
    """data_position: the sequences (rows) of global batches consumed. With the world size, the checkpoint counts
    only once committed (storage.COMMIT_PROTOCOL), and every rank's random state is verified."""
    state = {"step": step, "data_position": data_position, "data_unit": GLOBAL_ROWS}
    if world is not None:
        state |= {"world": world, "protocol": COMMIT_PROTOCOL}
    (Path(folder) / TRAIN_STATE).write_text(json.dumps(state))


def local_writer(folder: str, cached: bool = False):
    """DCP's writer into a local staging folder, without fsync: the folder only feeds the upload, read back from
    the page cache, and is useless after a crash whatever was synced; an fsync per file would bind the write to
    the disk (a gp3 root volume: 125 MiB/s, about 78 s for a node's 9.7 GB; docs/benchmarks.md)."""
    from torch.distributed.checkpoint import FileSystemWriter

    return FileSystemWriter(folder, sync_files=False, cache_staged_state_dict=cached)


def save(folder: str | Path, model, optimizer, step: int, data_position: int, rank: int,
         world: int | None = None) -> None:
    """Synchronous save: every rank waits until its shards are written. data_position: global rows consumed."""
    save_rng(folder, rank)
    dcp.save(_state(model, optimizer), checkpoint_id=str(folder), storage_writer=local_writer(str(folder)))
    if rank == 0:
        write_train_state(folder, step, data_position, world)


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

    The background writes coordinate over their own gloo group, so they never interleave with the training's
    collectives (torchtitan does the same).
    """

    def __init__(self) -> None:
        self._write_group = dist.new_group(backend="gloo")
        # One writer for the run: on GPU it keeps the staging copy in pinned CPU memory between
        # checkpoints, so only the first pays for allocating it (docs/benchmarks.md).
        self._writer = local_writer(tempfile.gettempdir(), cached=torch.cuda.is_available())
        self.pending: PendingCheckpoint | None = None

    def start(self, folder: str, model, optimizer, step: int, data_position: int, rank: int,
              world: int | None = None) -> PendingCheckpoint:
        assert self.pending is None or self.pending.future.done(), "finish the previous checkpoint first"
        started = time.perf_counter()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        save_rng(folder, rank)  # this step's state, before the next step draws from it
        future = dcp.async_save(_state(model, optimizer), checkpoint_id=folder, storage_writer=self._writer,
                                process_group=self._write_group)
        if rank == 0:
            write_train_state(folder, step, data_position, world)
        self.pending = PendingCheckpoint(folder, step, future, started, time.perf_counter() - started)
        return self.pending

    def finish(self) -> tuple[PendingCheckpoint, float]:
        """Wait for this rank's write (raising its error, if any); returns it and the seconds waited."""
        pending, self.pending = self.pending, None
        waited = time.perf_counter()
        pending.future.result()
        return pending, time.perf_counter() - waited


KEEP = 2
"""Committed checkpoints kept per run (Ray Train's num_to_keep was 2); older ones are deleted (retire)."""
COMMIT_WAIT_S = 1800.0
"""How long rank 0 waits for every rank's files of a checkpoint in storage before it gives the commit up (the
watchdog's allowance for a checkpoint, training.watchdog.LONG_S)."""
COMMIT_POLL_S = 0.5


class CheckpointFailed(RuntimeError):
    """A checkpoint could not be written, uploaded or committed; the run stops, so that its retry resumes from the
    newest committed one rather than train on with nothing saved."""


@dataclass
class Shipment:
    """One checkpoint on its way: written locally, uploaded, committed (rank 0)."""

    step: int
    uri: str
    done: Future | None = None


def checkpoint_folder_name(step: int, attempt: str) -> str:
    """One folder per step and attempt: a retry that saves a step again never writes into a folder that an earlier
    attempt left partial."""
    return f"checkpoint_{step:08d}_{attempt}"


class Checkpoints:
    """The run's checkpoints, as the training loop sees them: save() at a checkpoint step, poll() after every step,
    finish() when the loop stops. Each save goes write -> upload -> commit on a background thread of its own
    (uploaded in order, one at a time); poll() raises the first failure (CheckpointFailed). `stalls` holds how
    long each save paused training.

    Rank 0 writes the run's `settings` beside each checkpoint (what training.export needs) and any `files` given
    to save(); `export(model, folder)`, when given, puts a Hugging Face export in the checkpoint's hf/ folder
    (every rank calls it: it gathers the weights). `upload(local, uri)` is storage.upload_folder."""

    def __init__(self, background: bool, rank: int, world: int, run_uri: str, attempt: str, log,
                 settings: dict | None = None, export=None, upload=None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from training.storage import upload_folder

        self.saver = AsyncSaver() if background else None
        self.rank, self.world, self.run_uri, self.attempt, self.log = rank, world, run_uri.rstrip("/"), attempt, log
        self.settings, self.export = settings, export
        self.upload = upload or upload_folder
        self.stalls: list[float] = []
        self.shipments: list[Shipment] = []
        self._pipeline = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-upload")

    def save(self, model, optimizer, step: int, data_position: int, files: dict[str, str] | None = None,
             wait: bool = False) -> None:
        """A checkpoint of this step. wait: written synchronously and waited for until committed (the last one,
        a stop on request); CheckpointFailed if it is not."""
        self.poll()
        folder = tempfile.mkdtemp(prefix=f"checkpoint-{step}-")  # deleted once uploaded
        if self.rank == 0:
            written_by_rank0 = ({SETTINGS: json.dumps(self.settings)} if self.settings is not None else {}) | (files or {})
            for name, text in written_by_rank0.items():
                (Path(folder) / name).write_text(text)
        if self.export:
            started = time.perf_counter()
            self.export(model, f"{folder}/hf")
            self.log(f"export of step {step} into its checkpoint: training paused {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        previous = self.saver.pending if self.saver else None
        if previous is not None:
            self.saver.finish()  # DCP writes one checkpoint at a time; its upload goes on
        if self.saver is None or wait:
            save(folder, model, optimizer, step, data_position, self.rank, self.world)
            written: Future = Future()
            written.set_result(None)
            stall = time.perf_counter() - started
        else:
            written = self.saver.start(folder, model, optimizer, step, data_position, self.rank, self.world).future
            stall = time.perf_counter() - started
        self.stalls.append(stall)
        shipment = Shipment(step, f"{self.run_uri}/{checkpoint_folder_name(step, self.attempt)}")
        shipment.done = self._pipeline.submit(self._ship, shipment, folder, written, started, stall)
        self.shipments.append(shipment)
        if wait:
            self._wait(shipment)

    def _ship(self, shipment: Shipment, folder: str, written: Future, started: float, stall: float) -> None:
        import shutil

        from training import faults

        written.result()
        write_s = time.perf_counter() - started
        faults.before_upload(shipment.step, self.rank, self.world, self.run_uri, folder, shipment.uri)
        self.upload(folder, shipment.uri)
        shutil.rmtree(folder, ignore_errors=True)
        if self.rank == 0:
            commit(shipment.uri, self.world)
            retire(self.run_uri)
            self.log(f"checkpoint of step {shipment.step}: training paused {stall:.2f} s, written in {write_s:.1f} s, "
                     f"committed {time.perf_counter() - started:.1f} s after the save began ({shipment.uri})")

    def _wait(self, shipment: Shipment, timeout_s: float | None = None) -> None:
        from concurrent.futures import TimeoutError as Pending

        try:
            shipment.done.result(timeout=timeout_s)
            if self.rank != 0:  # rank 0 commits; the others wait for its marker
                wait_committed(shipment.uri, COMMIT_WAIT_S if timeout_s is None else timeout_s)
        except Pending:
            raise CheckpointFailed(f"checkpoint of step {shipment.step}: not committed within {timeout_s:g} s") from None
        except BaseException as error:
            raise CheckpointFailed(f"checkpoint of step {shipment.step}: {type(error).__name__}: {error}") from error

    def poll(self) -> None:
        """Raise the first failed save (CheckpointFailed); forget the finished ones."""
        for shipment in [s for s in self.shipments if s.done.done()]:
            self.shipments.remove(shipment)
            if shipment.done.exception() is not None:
                self._wait(shipment)

    def settle(self, timeout_s: float = COMMIT_WAIT_S) -> list[str]:
        """Wait until every save this rank started is written, uploaded and committed (each rank does its part; no
        collective, so a rank that stops alone cannot hang on the others); what failed, in words."""
        deadline = time.monotonic() + timeout_s
        problems = []
        for shipment in self.shipments:
            try:
                self._wait(shipment, max(deadline - time.monotonic(), 0.0))
            except CheckpointFailed as error:
                problems.append(str(error))
        self.shipments = []
        return problems

    def finish(self, timeout_s: float = COMMIT_WAIT_S) -> str:
        """On a stop that passes through the loop: settle, then say what is true: the newest committed checkpoint
        in storage (every rank says it: one may stop alone)."""
        problems = self.settle(timeout_s)
        line = newest_line(self.run_uri)
        if problems:
            line += f" ({'; '.join(problems)})"
        print(f"rank {self.rank} stopping: {line}", flush=True)
        return line


def commit(uri: str, world: int, timeout_s: float = COMMIT_WAIT_S) -> None:
    """Rank 0, once its own files are uploaded: wait until every rank's are in storage, whole (storage.missing_files),
    then write the commit marker, last. TimeoutError naming what is missing when they do not all arrive."""
    from training.storage import COMMIT, filesystem, missing_files, write_text

    fs, path = filesystem(uri)
    deadline = time.monotonic() + timeout_s
    while (missing := missing_files(fs, path, world=world)) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"not committed: {missing} after {timeout_s:g} s")
        time.sleep(COMMIT_POLL_S)
    write_text(f"{uri}/{COMMIT}", json.dumps({"world": world, "committed_at": time.time()}))


def wait_committed(uri: str, timeout_s: float) -> None:
    """Until rank 0's commit marker of this checkpoint is in storage; TimeoutError when it does not come."""
    from training.storage import COMMIT, exists

    deadline = time.monotonic() + timeout_s
    while not exists(f"{uri}/{COMMIT}"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{uri}: no commit marker after {timeout_s:g} s")
        time.sleep(COMMIT_POLL_S)


def retire(run_uri: str, keep: int = KEEP) -> list[str]:
    """Delete what no resume can use: complete checkpoints older than the newest `keep`, and partial ones at or
    before the newest complete step (a partial one of a later step may still be arriving); returns what went."""
    from training.storage import remove_folder, scan_checkpoints

    found = scan_checkpoints(run_uri)
    complete = [f for f in found if f.complete]
    if not complete:
        return []
    kept, newest = {f.uri for f in complete[-keep:]}, complete[-1].step
    gone = [f.uri for f in found if f.uri not in kept and (f.complete or (f.step is not None and f.step <= newest))]
    for uri in gone:
        remove_folder(uri)
    return gone


def resume_choice(run_uri: str) -> tuple[str | None, list[str]]:
    """(the newest complete checkpoint to resume from, or None; the lines that say which and why, and name every
    checkpoint passed over with what it lacks)."""
    from training.storage import scan_checkpoints

    found = scan_checkpoints(run_uri)
    complete = [f for f in found if f.complete]
    chosen = complete[-1] if complete else None
    lines = [f"resume: passed over {f.uri} (step {f.step if f.step is not None else '?'}): {f.why}"
             for f in found if not f.complete]
    if chosen:
        lines.append(f"resume: step {chosen.step}, the newest complete checkpoint ({chosen.why}): {chosen.uri}")
    elif found:
        lines.append("resume: no complete checkpoint; training starts from step 0")
    return (chosen.uri if chosen else None), lines


def newest_line(run_uri: str) -> str:
    """What a retry or a rerun resumes from, in words."""
    from training.storage import complete_checkpoints

    found = complete_checkpoints(run_uri)
    if not found:
        return "no checkpoint is committed: a retry or a rerun starts from step 0"
    step, uri = found[-1]
    return f"the newest committed checkpoint is step {step} ({uri}): a retry or a rerun resumes there"
