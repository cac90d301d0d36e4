"""training.preemption, case by case: the preStop hook accepts only the answer to its own request, a trainer that
was not asked answers nothing, and the hook's wait (the pod's grace period less HOOK_MARGIN_S,
cdk_constructs/ray_manifests.pre_stop_command) ends before the kubelet kills it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.conftest import ROOT
from training.preemption import ANSWER, HOOK_MARGIN_S, REQUEST, STOP_DIR_ENV, StopRequest, request_and_wait


def test_an_answer_to_an_earlier_request_is_not_taken_for_this_ones(tmp_path):
    """A trainer that answered after an earlier hook gave up leaves its answer behind: the next hook (a later
    drain of the pod) must wait for an answer to its own request, not report that stale save as committed."""
    (tmp_path / ANSWER).write_text("an-earlier-nonce step 3")
    answered, line = request_and_wait(0.3, tmp_path, poll_s=0.05)
    assert (answered, line) == (False, "preStop: no answer from the trainer within 0.3 s (no training here, or the "
                                       "save is slower)")


def test_a_trainer_that_was_not_asked_writes_no_answer(tmp_path):
    trainer = StopRequest(tmp_path)
    assert trainer.vote() == (0.0, 0.0)
    trainer.answer("step 3")
    assert not (tmp_path / ANSWER).exists()


def test_the_hook_gives_up_and_says_why_before_the_grace_period_ends(tmp_path):
    """The kubelet kills a preStop hook still running when terminationGracePeriodSeconds ends (Kubernetes' pod
    lifecycle docs), and then nothing says why the pod went unsaved. The pod's hook runs with
    --wait <grace - HOOK_MARGIN_S>; with a 6 s grace, it must have printed its line and exited within 6 s."""
    grace_s = 6
    env = os.environ | {STOP_DIR_ENV: str(tmp_path), "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "training.preemption", "--wait", str(grace_s - HOOK_MARGIN_S)],
                          env=env, capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < grace_s
    assert done.stdout.startswith("preStop: no answer from the trainer within")
    assert not (tmp_path / REQUEST).exists()
