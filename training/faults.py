"""Test-only faults and the row log that recovery tests read (tests/training/test_fault_matrix.py).

Faults come from TrainConfig's inject_* options (--inject-failure-at-step: SIGKILL to the last rank's worker, once
per run; --inject-nan-at-step: rank 0's loss NaN, on every attempt) and from FAULTS_ENV, "kind@step[,kind@step...]" for every run or
"run=kind@step,...;run2=..." for the runs named (the variable reaches the workers when Ray starts, so one setting
serves every run of a test module), each firing once per run (a marker in the run's folder), at the start of that
step, on the last rank unless said otherwise:
- nan: rank 0's loss is NaN (the non-finite stop);
- raise: an exception in the step;
- hang: the rank blocks for ever (the watchdog's exit; training.watchdog.HANG_AT_STEP_ENV does the same);
- kill: SIGKILL to the worker process (kill -9); with saves of this rank still in flight, once every other rank's
  part of them is in storage, so that what the kill cuts off is this rank's part alone, whatever the timing;
- sigterm: SIGTERM to the worker process, waited for until its handler has run (training.preemption);
- prestop: what the pod's preStop hook does (training.preemption.request_and_wait), on a thread; its line goes
  to <run>/.prestop-<step>.out; waited for until its request is there;
- slow: the upload of that step's checkpoint waits SLOW_UPLOAD_S first, so the save is still pending at the
  next steps;
- settle: every rank waits until every checkpoint it started is committed (raising a failed one, as the step's
  end would), so that the step's other fault comes just after a hand-over, not while one is still on its way;
- drain: the last rank waits until its own saves are done, failed ones included, so that the step's other fault
  comes after them;
- storage: the upload of that step's checkpoint fails after its first file (a storage write refused mid-save).

ROW_LOG_ENV names a local folder where every rank appends, per step, a digest of each row it trained
(<run name>/rank<r>.jsonl): which rows each step held, comparable across attempts and worker counts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path

FAULTS_ENV = "TRAINER_TEST_FAULTS"
ROW_LOG_ENV = "TRAINER_TEST_ROW_LOG"
SLOW_UPLOAD_S = 8.0
"""Longer than a chain's hang bound (tests/training/fault_chains.py), so a hang still finds the save pending."""
WORKER_ENV_NAMES = (FAULTS_ENV, ROW_LOG_ENV)
"""Passed on to the Ray workers when the driver has them (training.driver.worker_env)."""


def armed(kind: str, step: int, run_uri: str) -> bool:
    run = run_uri.rstrip("/").rsplit("/", 1)[-1]
    for part in (os.environ.get(FAULTS_ENV) or "").split(";"):
        named, _, faults = part.rpartition("=")
        if named in ("", run) and f"{kind}@{step}" in faults.split(","):
            return True
    return False


def _once(kind: str, step: int, run_uri: str) -> bool:
    """Whether this fault fires now: armed (an inject_* option is armed by its caller) and not fired before in
    this run."""
    if kind != "injected-failure" and not armed(kind, step, run_uri):
        return False
    from training.storage import exists, write_text

    marker = f"{run_uri}/.fault-{kind}@{step}"
    if exists(marker):
        return False
    write_text(marker, str(step))
    print(f"injecting {kind} at step {step}", flush=True)
    return True


def at_step_start(cfg, step: int, rank: int, world: int, run_uri: str, model, checkpoints=None, waiting=None):
    """The faults due at the start of `step`; a forward hook to remove after the step when the loss is made NaN.
    `waiting(what)`: a context in which a fault's own wait is no hang (the watchdog's long_phase)."""
    waiting = waiting or (lambda what: contextlib.nullcontext())
    if checkpoints is not None and armed("settle", step, run_uri):
        with waiting("test fault: settle"):
            problems = checkpoints.settle()
        if problems:  # what the step's end would raise (Checkpoints.poll)
            raise RuntimeError("; ".join(problems))
    nan = cfg.inject_nan_at_step == step or (rank == 0 and _once("nan", step, run_uri))
    if rank == world - 1:
        if checkpoints is not None and armed("drain", step, run_uri):
            with waiting("test fault: drain"):
                for shipment in checkpoints.shipments:
                    shipment.done.exception()  # done, whether it failed or not
        if cfg.inject_failure_at_step == step and _once("injected-failure", step, run_uri):
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9: nothing of the trainer runs after it
        _last_rank_faults(step, run_uri, waiting, checkpoints, world)
    if nan and rank == 0:
        return model.register_forward_hook(lambda module, args, output: output * float("nan"))
    return None


def _last_rank_faults(step: int, run_uri: str, waiting, checkpoints=None, world: int = 1) -> None:
    if _once("raise", step, run_uri):
        raise RuntimeError(f"injected exception at step {step}")
    if _once("kill", step, run_uri):
        with waiting("test fault: kill"):
            for shipment in checkpoints.shipments if checkpoints is not None else []:
                _wait_for(lambda: _others_uploaded(shipment.uri, world), f"the other ranks' part of {shipment.uri}")
        os.kill(os.getpid(), signal.SIGKILL)
    if _once("hang", step, run_uri):
        threading.Event().wait()
    if _once("sigterm", step, run_uri):
        from training.preemption import sigterm_received

        os.kill(os.getpid(), signal.SIGTERM)
        with waiting("test fault: sigterm"):
            _wait_for(sigterm_received, f"the SIGTERM handler at step {step}")
    if _once("prestop", step, run_uri):
        with waiting("test fault: prestop"):
            _run_prestop_hook(step, run_uri)


def _run_prestop_hook(step: int, run_uri: str) -> None:
    """What the pod's preStop hook does (training.preemption.request_and_wait), on a thread of this worker: a
    process of its own would be ended with the worker by Ray. Its line goes to <run>/.prestop-<step>.out."""
    from training.preemption import REQUEST, request_and_wait, stop_dir

    def hook() -> None:
        _, line = request_and_wait(120)
        Path(f"{run_uri}/.prestop-{step}.out").write_text(line + "\n")  # local runs only: the test reads it

    threading.Thread(target=hook, name="prestop-hook", daemon=True).start()
    _wait_for(lambda: (stop_dir() / REQUEST).exists(), f"the preStop hook's request at step {step}")


def _others_uploaded(uri: str, world: int) -> bool:
    """Whether every rank's part of the checkpoint at `uri` but the last rank's is in storage: DCP's index (rank 0),
    their shard files (`__<rank>_<n>.distcp`, DCP's FileSystemWriter names) and random states."""
    from training.storage import file_sizes, filesystem, rng_file

    fs, path = filesystem(uri)
    names = file_sizes(fs, path)
    others = range(world - 1)
    return (".metadata" in names and all(rng_file(rank) in names for rank in others)
            and all(any(name.startswith(f"__{rank}_") for name in names) for rank in others))


def _wait_for(done, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"test fault: {what} never came")
        time.sleep(0.01)


def before_upload(step: int, rank: int, world: int, run_uri: str, folder: str, uri: str) -> None:
    """The upload faults of this rank's part of the checkpoint of `step`."""
    if rank != world - 1:
        return
    if _once("slow", step, run_uri):
        time.sleep(SLOW_UPLOAD_S)
    if _once("storage", step, run_uri):
        from training.storage import write_bytes

        first = sorted(Path(folder).iterdir())[0]
        write_bytes(f"{uri}/{first.name}", first.read_bytes())
        raise OSError(f"injected storage failure: {uri} refused a write after {first.name}")


class RowLog:
    """Per step, a digest of every row this rank trained, appended to ROW_LOG_ENV/<run>/rank<r>.jsonl (off without it)."""

    def __init__(self, run_name: str, rank: int, world: int, attempt: str) -> None:
        folder = os.environ.get(ROW_LOG_ENV)
        self.path = Path(folder) / run_name / f"rank{rank}.jsonl" if folder else None
        self.world, self.attempt, self.rows = world, attempt, []

    def tap(self, batches):
        if self.path is None:
            return batches
        return self._tapped(batches)

    def _tapped(self, batches):
        for batch in batches:
            self.rows += [row_id(row) for row in batch["input_ids"]]
            yield batch

    def started(self, step: int, lines: list[str]) -> None:
        """The attempt's resume: the step it starts after and the lines that said why."""
        self._append({"attempt": self.attempt, "world": self.world, "resumed_from": step, "lines": lines})

    def step_done(self, step: int) -> None:
        self._append({"attempt": self.attempt, "world": self.world, "step": step, "rows": self.rows})
        self.rows = []

    def _append(self, record: dict) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as file:
            file.write(json.dumps(record) + "\n")


def row_id(row) -> str:
    """A row's identity: a digest of its token ids, the same whichever worker or attempt trained it."""
    return hashlib.blake2b(row.numpy().astype("int64").tobytes(), digest_size=8).hexdigest()
