"""The stop request (training/preemption.py): the pod's preStop hook as the kubelet runs it (`python -m
training.preemption --wait N` in the container), answered by a trainer's StopRequest; and SIGTERM to a worker
process. The save itself and the retry are tested under Ray in test_fault_matrix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import ROOT
from training.preemption import ANSWER, REQUEST, STOP_DIR_ENV, StepEnd, StopRequest, step_end


def _hook(folder, wait_s: float) -> subprocess.Popen:
    env = os.environ | {STOP_DIR_ENV: str(folder), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "training.preemption", "--wait", str(wait_s)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _vote_until_asked(request: StopRequest, timeout_s: float = 20.0) -> tuple[float, float]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        vote = request.vote()
        if vote != (0.0, 0.0):
            return vote
        time.sleep(0.05)
    raise AssertionError("the hook's request never came")


def test_the_prestop_hook_returns_once_the_trainer_answers_and_leaves_nothing_behind(tmp_path):
    hook = _hook(tmp_path, 60)
    trainer = StopRequest(tmp_path)
    assert _vote_until_asked(trainer) == (1.0, 0.0)
    trainer.answer("step 7")
    out, _ = hook.communicate(timeout=30)
    assert hook.returncode == 0
    assert out.strip() == "preStop: the trainer committed a checkpoint of step 7"
    assert not (tmp_path / REQUEST).exists() and not (tmp_path / ANSWER).exists()


def test_a_hook_without_a_trainer_gives_up_at_its_wait_and_says_why(tmp_path):
    hook = _hook(tmp_path, 0.5)
    out, _ = hook.communicate(timeout=30)
    assert hook.returncode == 0  # a failing hook only adds an event; the pod goes either way
    assert out.strip() == ("preStop: no answer from the trainer within 0.5 s (no training here, or the save is "
                           "slower)")
    assert not (tmp_path / REQUEST).exists()


def test_a_request_already_answered_is_not_voted_for_again(tmp_path):
    """The hook removes its request a moment after the answer; the steps in between must not save again."""
    (tmp_path / REQUEST).write_text("nonce-1")
    trainer = StopRequest(tmp_path)
    assert trainer.vote() == (1.0, 0.0)
    trainer.answer("step 3")
    assert (tmp_path / ANSWER).read_text() == "nonce-1 step 3"
    assert trainer.vote() == (0.0, 0.0)
    (tmp_path / REQUEST).write_text("nonce-2")  # a new request (a later drain of the same pod)
    assert trainer.vote() == (1.0, 0.0)


def test_no_request_no_vote(tmp_path):
    assert StopRequest(tmp_path).vote() == (0.0, 0.0)


def _signalled(kills: int, running: tuple[bool, ...] = (True,)) -> subprocess.CompletedProcess:
    """A process that installs the handler, sets loop_running to each of `running` in turn and sends itself SIGTERM
    `kills` times, then reports the flag."""
    code = textwrap.dedent(f"""
        import os, signal, time
        from training import preemption
        assert preemption.install_sigterm_handler()
        for state in {running}:
            preemption.loop_running(state)
        for _ in range({kills}):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        print("flag", preemption.sigterm_received(), "vote", preemption.StopRequest().vote()[1])
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=os.environ | {"PYTHONPATH": str(ROOT), STOP_DIR_ENV: "/nonexistent"})


def test_sigterm_to_a_worker_raises_its_stop_vote_instead_of_ending_it():
    done = _signalled(1)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "flag True vote 1.0"
    assert "SIGTERM received" in done.stdout


def test_a_second_sigterm_does_what_the_first_would_have_done():
    """Asked twice, the process goes: the handler that was there before (here the default) runs."""
    done = _signalled(2)
    assert done.returncode == -15


@pytest.mark.parametrize("running", [(False,), (True, False)], ids=["before the loop", "after the loop"])
def test_sigterm_outside_the_loop_ends_the_process_at_once(running):
    """Ray retires a worker whose loop ended with SIGTERM: it must go, not wait for a save nobody will make."""
    done = _signalled(1, running=running)
    assert done.returncode == -15 and "SIGTERM received" not in done.stdout


@pytest.mark.parametrize("step, asked, signalled, expected", [
    (7, 0.0, 0.0, StepEnd(save=False, wait=False, end_attempt=False)),
    (8, 0.0, 0.0, StepEnd(save=True, wait=False, end_attempt=False)),  # a periodic save uploads while training goes on
    (24, 0.0, 0.0, StepEnd(save=True, wait=True, end_attempt=False)),  # the last step's, before the run reports done
    # The preStop hook (on one of 2 workers): committed before the hook's answer, after which the kubelet sends
    # SIGTERM; the attempt trains on, so that Ray ends it as a preemption, not an error counted in max_failures.
    (7, 1.0, 0.0, StepEnd(save=True, wait=True, end_attempt=False)),
    (8, 2.0, 0.0, StepEnd(save=True, wait=True, end_attempt=False)),
    (7, 0.0, 1.0, StepEnd(save=True, wait=True, end_attempt=True)),  # SIGTERM to a worker: save, then end as asked
    (7, 1.0, 1.0, StepEnd(save=True, wait=True, end_attempt=True)),
])
def test_a_stop_request_saves_its_step_and_waits_until_it_is_committed(step, asked, signalled, expected):
    """A run of 24 steps saving every 4th; asked and signalled are the step's votes summed over the ranks."""
    assert step_end(step, 24, 4, asked, signalled) == expected


def test_without_periodic_checkpoints_only_the_last_step_and_a_stop_are_saved():
    assert [step for step in range(1, 25) if step_end(step, 24, 0, 0.0, 0.0).save] == [24]
    assert step_end(5, 24, 0, 1.0, 0.0).save

