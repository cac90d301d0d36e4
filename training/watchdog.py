"""The hang watchdog: a collective that never returns stops the attempt with the evidence written down.

An NCCL collective that hangs raises nothing; without this thread the job would wait until the RayJob's
activeDeadlineSeconds. Each rank's thread watches the time since its last completed step; past the bound,
it writes every thread's Python stack and (on NCCL) the flight recorder's trace to
<run>/hang-dumps/<attempt>/rank<r>-..., lets a checkpoint still being saved finish (its write, upload and
commit run on threads of their own), then ends the process with EXIT_CODE, so the Ray attempt fails and
the retry resumes from the newest committed checkpoint.

The bound per step: --watchdog-step-seconds where set; else max(10 x the planner's step time, 60 s); without a
prediction, max(60 s, 10 x the slowest of the MEASURED_STEPS steps after the first), LONG_S until they are timed.
"""

from __future__ import annotations

import faulthandler
import os
import tempfile
import threading
import time
from contextlib import contextmanager

EXIT_CODE = 75
"""EX_TEMPFAIL (sysexits.h): a temporary failure, worth a retry; distinct from a crash's 1."""
STEP_FACTOR = 10
FLOOR_S = 60.0
MEASURED_STEPS = 3
"""Steps timed, after the first (which holds compilation and warm-up), to bound a run without a prediction."""
LONG_S = 1800.0
"""The first step (NCCL setup, compilation, the first data), checkpoints, evaluation and data waits."""
POLL_S = 1.0
EXIT_GRACE_S = 10.0
"""How long a rank waits after its dump before it exits, so that its peers' dumps are written (dump_and_exit)."""
DUMP_FOLDER = "hang-dumps"
LINE_PREFIX = "hang watchdog:"
# The flight recorder keeps the last 2,000 collectives of each process group (PyTorch's flight recorder docs).
# TORCH_FR_BUFFER_SIZE is torch 2.13's name; the older TORCH_NCCL_TRACE_BUFFER_SIZE still works but warns in every worker.
WORKER_ENV = {"TORCH_FR_BUFFER_SIZE": "2000"}
# Test-only: the last rank blocks forever at this step, once per run; and a floor below 60 s for a test's time.
HANG_AT_STEP_ENV = "TRAINER_TEST_HANG_AT_STEP"
FLOOR_ENV = "TRAINER_TEST_WATCHDOG_FLOOR_S"


def step_bound_s(predicted_step_s: float | None, floor_s: float = FLOOR_S) -> float:
    """max(10 x the planned step time, the floor); the floor alone without a plan."""
    return max(STEP_FACTOR * (predicted_step_s or 0.0), floor_s)


def measured_bound(step_seconds: list[float], floor_s: float = FLOOR_S) -> float:
    """max(the floor, 10 x the slowest timed step)."""
    return max(floor_s, STEP_FACTOR * max(step_seconds))


def floor_s() -> float:
    return float(os.environ.get(FLOOR_ENV) or FLOOR_S)


class Watchdog:
    """Calls `on_hang(reason)` once when no step completed within the allowance: `bound_s` after a step,
    LONG_S for the first step and inside `long_phase()`. bound_s None: measured (measured_bound), LONG_S until
    then; `log` hears the bound once it is measured."""

    def __init__(self, bound_s: float | None, on_hang, clock=time.monotonic, long_s: float = LONG_S,
                 floor_s: float = FLOOR_S, log=None):
        self.bound_s, self.long_s, self._on_hang, self._clock = bound_s, long_s, on_hang, clock
        self.floor_s, self._log = floor_s, log
        self._timed: list[float] | None = [] if bound_s is None else None
        self._lock = threading.Lock()
        self._since, self._allowance, self._waiting_for = clock(), long_s, "the first step"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = False

    def step_done(self, step: int) -> None:
        with self._lock:
            now = self._clock()
            if self._timed is not None and step > 1:  # the first step holds compilation and warm-up
                self._timed.append(now - self._since)
                if len(self._timed) == MEASURED_STEPS:
                    self.bound_s = measured_bound(self._timed, self.floor_s)
                    self._timed = None
                    if self._log:
                        self._log(f"{LINE_PREFIX} no planned step time: bound {self.bound_s:.0f} s per step, the larger "
                                  f"of {self.floor_s:g} s and {STEP_FACTOR} x the slowest of steps 2-{MEASURED_STEPS + 1}")
            allowance = self.bound_s if self.bound_s is not None else self.long_s
            self._since, self._allowance, self._waiting_for = now, allowance, f"step {step + 1}"

    @contextmanager
    def long_phase(self, what: str):
        with self._lock:
            previous = self._allowance, self._waiting_for
            self._since, self._allowance, self._waiting_for = self._clock(), self.long_s, what
        try:
            yield
        finally:
            with self._lock:  # the step's own allowance (the first step's is long) starts again after the phase
                self._since, (self._allowance, self._waiting_for) = self._clock(), previous

    def waited(self, batches):
        """The iterator's items, each wait for one inside a long phase (a slow data source is no hang)."""
        iterator = iter(batches)
        while True:
            with self.long_phase("data"):
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    def check(self) -> bool:
        """Fire when overdue (at most once); True when it fired now."""
        with self._lock:
            waited = self._clock() - self._since
            overdue = not self.fired and waited > self._allowance
            if overdue:
                self.fired = True
                reason = f"no progress for {waited:.0f} s waiting for {self._waiting_for} (bound {self._allowance:g} s)"
        if overdue:
            self._on_hang(reason)
        return overdue

    def start(self, poll_s: float = POLL_S) -> "Watchdog":
        def watch() -> None:
            while not self._stop.wait(poll_s):
                if self.check():
                    return

        self._thread = threading.Thread(target=watch, name="hang-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


def python_stacks() -> str:
    """Every thread's Python stack, as faulthandler writes it (it needs a real file)."""
    with tempfile.TemporaryFile("w+") as file:
        faulthandler.dump_traceback(file, all_threads=True)
        file.seek(0)
        return file.read()


def flight_recorder_trace() -> tuple[str, bytes] | None:
    """(backend, its flight recorder's pickled trace) of the default process group, or None without one. NCCL's
    recorder is dumped by _dump_nccl_trace (NCCL builds of torch); torch 2.13's _dump_fr_trace dumps gloo's."""
    import torch
    import torch.distributed as dist  # here: the watch imports this module without torch

    if not dist.is_initialized():
        return None
    backend = "nccl" if "nccl" in dist.get_backend() else dist.get_backend()  # "cpu:gloo,cuda:nccl" is NCCL's
    dump_trace = getattr(torch._C._distributed_c10d, "_dump_nccl_trace" if backend == "nccl" else "_dump_fr_trace", None)
    return None if dump_trace is None else (backend, dump_trace())


def dump(folder: str, rank: int, reason: str) -> list[str]:
    """Write this rank's evidence into `folder` (local or s3://); returns what was written."""
    from training.storage import write_bytes, write_text

    written = [f"{folder}/rank{rank}-stacks.txt"]
    write_text(written[0], f"rank {rank}: {reason}\n\n{python_stacks()}")
    trace = flight_recorder_trace()
    if trace is not None:
        backend, pickled = trace
        written.append(f"{folder}/rank{rank}-{backend}-trace.pkl")
        write_bytes(written[1], pickled)
    return written


def dump_and_exit(folder: str, rank: int, reason: str, exit=os._exit, grace_s: float = EXIT_GRACE_S,
                  before_exit=None) -> None:
    """The on_hang of a run: dump, say where, let `before_exit` run (a checkpoint in flight finishes), and end the
    process (the hung collective never returns, so nothing short of ending the process frees the rank). The exit
    waits grace_s after the dump: every rank's watchdog fires at about the same time, and a rank that exits breaks
    its peers' collectives, which end their processes (an exception or an abort) and, without the wait, cut off
    dumps still being written."""
    try:
        dump(folder, rank, reason)
    finally:
        print(f"{LINE_PREFIX} rank {rank}: {reason}; stacks and NCCL flight recorder in {folder}/; exiting "
              f"{EXIT_CODE} so the attempt restarts from the newest committed checkpoint", flush=True)
        try:
            if before_exit:
                before_exit()
        finally:
            time.sleep(grace_s)
            exit(EXIT_CODE)


def for_run(run_uri: str, attempt: str, rank: int, predicted_step_s: float | None, bound_s: float | None = None,
            before_exit=None, log=None) -> Watchdog:
    """A started watchdog for one attempt of a run: bound_s as set (--watchdog-step-seconds), else from the
    prediction, else measured. `before_exit` runs before a hang ends the process."""
    folder = f"{run_uri}/{DUMP_FOLDER}/{attempt}"
    floor = floor_s()
    if bound_s is None and predicted_step_s:
        bound_s = step_bound_s(predicted_step_s, floor)
    grace_s = min(EXIT_GRACE_S, bound_s or floor)  # a test's short floor keeps its wait short too
    return Watchdog(bound_s, lambda reason: dump_and_exit(folder, rank, reason, grace_s=grace_s, before_exit=before_exit),
                    floor_s=floor, log=log).start()


def maybe_hang(step: int, rank: int, world: int, run_uri: str) -> None:
    """Test-only (HANG_AT_STEP_ENV): the last rank blocks forever at the start of that step, once per run."""
    if os.environ.get(HANG_AT_STEP_ENV) != str(step) or rank != world - 1:
        return
    from training.storage import exists, write_text

    marker = f"{run_uri}/.injected-hang"
    if exists(marker):
        return
    write_text(marker, str(step))
    print(f"injecting a hang at step {step} (rank {rank})", flush=True)
    threading.Event().wait()


def dump_folders(log_lines: list[str]) -> list[str]:
    """The dump folders the watchdog named in a job's log, in order, once each (for the watch)."""
    found: list[str] = []
    for line in log_lines:
        if LINE_PREFIX in line and " in " in line:
            folder = line.split("NCCL flight recorder in ", 1)[-1].split("/;", 1)[0]
            if folder not in found:
                found.append(folder)
    return found
