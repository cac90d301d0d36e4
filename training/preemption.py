"""Save on a stop request: a pod being drained, or SIGTERM to a training worker, saves the current step first.

Two ways a stop is asked for, both seen by the loop at the next step boundary:
- the pod's preStop hook (`python -m training.preemption`, cdk_constructs/ray_manifests.py) writes a request file
  into the container and waits until the trainer answers that its checkpoint is committed. Kubernetes runs the
  hook before it sends SIGTERM to the container's PID 1, `ray start --block`, whose handler kills the raylet and
  with it every worker within seconds (ray/_private/node.py: after at most RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S of
  draining), so SIGTERM itself never gives the trainer time to save: the hook must come first. After the answer,
  the attempt trains on: Ray marks the node as draining for preemption on that SIGTERM, and Ray Train ends the
  attempt as a preemption, retried under its own budget (FailureConfig.max_preemption_failures, unlimited),
  not max_failures;
- SIGTERM to a worker process itself (`kill <pid>`): Ray Train runs the training function in a thread of the
  worker actor (ray/train/v2/_internal/execution/worker_group/thread_runner.py), and Python runs signal handlers
  on the main thread only, so the handler is installed by a task on the worker's own actor, whose main thread
  runs its tasks. After the save the attempt ends (StopRequested), as the signal asked.

Every rank votes each step in the step's first collective (train_step's count); when any rank was asked, every
rank saves that step synchronously, and the checkpoint is committed before the answer (training.checkpoint).
Nothing here imports torch or Ray at import time: the preStop hook starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

STOP_DIR_ENV = "TRAINER_STOP_DIR"
DEFAULT_STOP_DIR = "/tmp/eks-fsdp-efa-stop"
REQUEST, ANSWER = "request", "answer"
HOOK_MARGIN_S = 5
"""The hook returns this long before the grace period ends, so that it says why instead of being killed."""

_sigterm = threading.Event()
_training = threading.Event()
"""Set while a training loop runs (loop_running): SIGTERM then asks for a save; otherwise it does what it did before
(Ray ends a worker it retires with SIGTERM, which must not wait for a loop that is gone)."""
_previous_handler = None


class StopRequested(RuntimeError):
    """The attempt ends on purpose after a committed checkpoint of the step it stopped at."""


def stop_dir() -> Path:
    return Path(os.environ.get(STOP_DIR_ENV) or DEFAULT_STOP_DIR)


# ---------------------------------------------------------------- the preStop hook


def request_and_wait(wait_s: float, folder: Path | None = None, poll_s: float = 0.2) -> tuple[bool, str]:
    """Ask the trainer processes of this pod (container) to save, and wait for the answer; (answered, the line
    to print). The request and the answer are removed afterwards, so a later attempt on this pod is not asked."""
    folder = folder or stop_dir()
    folder.mkdir(parents=True, exist_ok=True)
    nonce = uuid.uuid4().hex
    _write_atomically(folder / REQUEST, nonce)
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            answer = _read(folder / ANSWER)
            if answer and answer.split(" ", 1)[0] == nonce:
                return True, f"preStop: the trainer committed a checkpoint of {answer.split(' ', 1)[1]}"
            time.sleep(poll_s)
        return False, f"preStop: no answer from the trainer within {wait_s:g} s (no training here, or the save is slower)"
    finally:
        for name in (REQUEST, ANSWER):
            (folder / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.preemption", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wait", type=float, required=True, help="seconds to wait for the trainer's answer")
    args = parser.parse_args(argv)
    _, line = request_and_wait(args.wait)
    print(line, flush=True)
    return 0  # a hook that fails only adds a warning event; the pod goes either way


# ---------------------------------------------------------------- in the training workers


class StopRequest:
    """What this worker was asked: vote() once a step (the numbers go into the step's collective); answer() once
    the checkpoint of the agreed step is committed."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or stop_dir()
        self._answered: set[str] = set()
        self._pending: str | None = None

    def vote(self) -> tuple[float, float]:
        """(asked by the pod's preStop hook, SIGTERM received) on this worker, as numbers to sum over the ranks."""
        nonce = _read(self.folder / REQUEST)
        self._pending = nonce if nonce and nonce not in self._answered else None
        return float(self._pending is not None), float(_sigterm.is_set())

    def answer(self, what: str) -> None:
        """Tell this pod's waiting preStop hook (if it asked) that `what` is committed."""
        if self._pending is None:
            return
        _write_atomically(self.folder / ANSWER, f"{self._pending} {what}")
        self._answered.add(self._pending)
        self._pending = None


@dataclass(frozen=True)
class StepEnd:
    """What the loop does once a step is done: save it, wait until that checkpoint is committed, end the attempt."""

    save: bool
    wait: bool
    end_attempt: bool


def step_end(step: int, steps: int, checkpoint_every: int, asked: float, signalled: float) -> StepEnd:
    """The last step and every checkpoint_every-th are saved, the last waited for. A stop request (asked: the pod's
    preStop hook, signalled: SIGTERM to a worker; votes summed over the ranks) saves this step too, waited for until
    committed: the hook is answered right after, and the kubelet then sends SIGTERM. Only SIGTERM ends the attempt;
    after the hook's answer it trains on until Ray ends it as a preemption (this module's docstring)."""
    stop = bool(asked or signalled)
    save = step == steps or bool(checkpoint_every and step % checkpoint_every == 0) or stop
    return StepEnd(save=save, wait=save and (step == steps or stop), end_attempt=bool(signalled))


def install_sigterm_handler() -> bool:
    """SIGTERM sets this process's stop flag (a second one does what it did before). Ray Train's training thread
    is not the main thread: the handler is then installed by a task on this worker's own actor. False where it
    cannot be (no actor, another runtime)."""
    if threading.current_thread() is threading.main_thread():
        _install()
        return True
    try:
        import ray

        actor = ray.get_runtime_context().current_actor
        ray.get(actor.execute.remote(_install))  # RayTrainWorker.execute(fn) runs fn on the actor's main thread
        return True
    except Exception:  # noqa: BLE001 - no actor, or an actor without execute: the run goes on without the handler
        return False


def sigterm_received() -> bool:
    return _sigterm.is_set()


def loop_running(running: bool) -> None:
    """While the loop runs, SIGTERM asks for a save; before and after, it ends the process as it did."""
    if running:
        _training.set()
    else:
        _training.clear()


def _install() -> None:
    global _previous_handler
    _previous_handler = signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame) -> None:
    if _sigterm.is_set() or not _training.is_set():  # asked twice, or no loop to save: what was there before
        # (Ray's handler exits; the default ends the process)
        if callable(_previous_handler):
            _previous_handler(signum, frame)
        else:
            signal.signal(signal.SIGTERM, _previous_handler)
            os.kill(os.getpid(), signal.SIGTERM)
        return
    _sigterm.set()
    print(f"SIGTERM received (pid {os.getpid()}): saving at the next step boundary, then stopping", flush=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(text)
    os.replace(scratch, path)


if __name__ == "__main__":
    sys.exit(main())
