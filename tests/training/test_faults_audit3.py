"""The faults the fast tests did not fire in this process: drain, kill, hang, sigterm, prestop and slow, each on
the last rank only and at its own step, with the wait its docstring promises (training/faults.py). The process
is not really killed or blocked: os.kill and the blocking wait are recorded instead."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from training import faults, preemption
from training.command_line import parse_args
from training.faults import FAULTS_ENV, RowLog, at_step_start, before_upload


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    (tmp_path / "run").mkdir()
    return str(tmp_path / "run")


@pytest.fixture
def kills(monkeypatch):
    sent = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    return sent


def _phases():
    """A `waiting` that records the long phases a fault opened."""
    opened = []

    @contextlib.contextmanager
    def waiting(what):
        opened.append(what)
        yield
    return opened, waiting


def _later(future: Future, value=None, error=None, after_s: float = 0.1) -> None:
    def finish():
        time.sleep(after_s)
        future.set_exception(error) if error else future.set_result(value)
    threading.Thread(target=finish, daemon=True).start()


def test_a_drain_fault_waits_on_the_last_rank_for_its_saves_failed_ones_included(run, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "drain@4")
    ok, failed = Future(), Future()
    _later(ok, None)
    _later(failed, error=OSError("refused"))
    checkpoints = SimpleNamespace(shipments=[SimpleNamespace(done=ok), SimpleNamespace(done=failed)])
    opened, waiting = _phases()
    at_step_start(parse_args([]), 4, 1, 2, run, model=None, checkpoints=checkpoints, waiting=waiting)
    assert ok.done() and failed.done()  # a failed save does not raise here: the step's end does
    assert opened == ["test fault: drain"]


def test_a_drain_fault_leaves_the_other_ranks_alone(run, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "drain@4")
    pending = Future()
    at_step_start(parse_args([]), 4, 0, 2, run, model=None,
                  checkpoints=SimpleNamespace(shipments=[SimpleNamespace(done=pending)]))
    assert not pending.done()  # rank 0 did not wait (it would have waited for ever)


def test_a_kill_fault_sends_sigkill_to_the_last_ranks_own_process_once_the_others_saves_are_there(run, tmp_path, monkeypatch,
                                                                                                   kills):
    monkeypatch.setenv(FAULTS_ENV, "kill@5")
    saved = tmp_path / "run" / "checkpoint_5"
    saved.mkdir()
    for name in (".metadata", "__0_0.distcp", "rng-rank0.pt"):  # rank 0's part, as DCP and training.checkpoint name it
        (saved / name).write_bytes(b"x")
    checkpoints = SimpleNamespace(shipments=[SimpleNamespace(uri=str(saved))])
    at_step_start(parse_args([]), 5, 0, 2, run, model=None, checkpoints=checkpoints)
    assert kills == []  # not rank 0's
    at_step_start(parse_args([]), 5, 1, 2, run, model=None, checkpoints=checkpoints)
    assert kills == [(faults.os.getpid(), signal.SIGKILL)]
    at_step_start(parse_args([]), 5, 1, 2, run, model=None, checkpoints=checkpoints)
    assert len(kills) == 1  # once per run: the retry trains step 5 through


def test_a_kill_fault_gives_up_when_the_other_ranks_part_never_arrives(run, tmp_path, monkeypatch, kills):
    monkeypatch.setenv(FAULTS_ENV, "kill@5")
    real = faults._wait_for
    monkeypatch.setattr(faults, "_wait_for", lambda done, what: real(done, what, timeout_s=0.05))
    checkpoints = SimpleNamespace(shipments=[SimpleNamespace(uri=str(tmp_path / "run" / "checkpoint_5"))])
    with pytest.raises(RuntimeError, match=r"^test fault: the other ranks' part of .*checkpoint_5 never came$"):
        at_step_start(parse_args([]), 5, 1, 2, run, model=None, checkpoints=checkpoints)
    assert kills == []


def test_a_hang_fault_blocks_the_last_rank(run, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "hang@6")
    blocked = []
    monkeypatch.setattr(faults, "threading", SimpleNamespace(Event=lambda: SimpleNamespace(wait=lambda: blocked.append(1))))
    at_step_start(parse_args([]), 6, 0, 2, run, model=None)
    assert blocked == []
    at_step_start(parse_args([]), 6, 1, 2, run, model=None)
    assert blocked == [1]


def test_a_sigterm_fault_signals_the_last_ranks_process_and_waits_for_its_handler(run, monkeypatch, kills):
    monkeypatch.setenv(FAULTS_ENV, "sigterm@7")
    asked = []

    def handler_has_run():  # the handler sets its flag a moment after the signal: the third look finds it
        asked.append(1)
        return bool(kills) and len(asked) >= 3
    monkeypatch.setattr(preemption, "sigterm_received", handler_has_run)
    opened, waiting = _phases()
    at_step_start(parse_args([]), 7, 0, 2, run, model=None, waiting=waiting)
    assert kills == [] and opened == []
    at_step_start(parse_args([]), 7, 1, 2, run, model=None, waiting=waiting)
    assert kills == [(faults.os.getpid(), signal.SIGTERM)]
    assert len(asked) == 3  # waited until the handler had run, not returned at once
    assert opened == ["test fault: sigterm"]


def test_a_prestop_fault_runs_the_hook_and_writes_its_line_beside_the_run(run, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "prestop@8")
    monkeypatch.setenv(preemption.STOP_DIR_ENV, str(tmp_path / "stop"))
    answered = threading.Event()

    def hook(wait_s):  # what request_and_wait does first: the request, which the fault waits for
        preemption._write_atomically(preemption.stop_dir() / preemption.REQUEST, "nonce")
        answered.set()
        return True, f"preStop: answered (waited up to {wait_s:g} s)"
    monkeypatch.setattr(preemption, "request_and_wait", hook)
    opened, waiting = _phases()
    at_step_start(parse_args([]), 8, 1, 2, run, model=None, waiting=waiting)
    assert (tmp_path / "stop" / preemption.REQUEST).exists() and opened == ["test fault: prestop"]
    answered.wait(5)
    for _ in range(500):
        if (tmp_path / "run" / ".prestop-8.out").exists():
            break
        time.sleep(0.01)
    assert (tmp_path / "run" / ".prestop-8.out").read_text() == "preStop: answered (waited up to 120 s)\n"


def test_a_slow_fault_delays_the_last_ranks_upload_only(run, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "slow@9")
    monkeypatch.setattr(faults, "SLOW_UPLOAD_S", 0.3)
    started = time.monotonic()
    before_upload(9, 0, 2, run, str(tmp_path), f"{run}/checkpoint_9")
    assert time.monotonic() - started < 0.25
    before_upload(9, 1, 2, run, str(tmp_path), f"{run}/checkpoint_9")
    assert time.monotonic() - started >= 0.3


def test_without_the_row_log_setting_nothing_is_tapped_or_written(tmp_path, monkeypatch):
    monkeypatch.delenv(faults.ROW_LOG_ENV, raising=False)
    rows = RowLog("run", 0, 2, "a")
    batches = iter([])
    assert rows.tap(batches) is batches
    rows.step_done(1)
    assert rows.path is None and list(tmp_path.iterdir()) == []
