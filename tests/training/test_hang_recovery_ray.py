"""A hang under Ray Train end to end: the watchdog ends the attempt, the retry resumes from the last checkpoint."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from training import watchdog
from training.config import TrainConfig, validate
from training.train import fit
from tests.conftest import local_ray

HANG_AT, EVERY, STEPS, FLOOR_S = 3, 2, 4, 2


@pytest.fixture(scope="module")
def hung_run(tmp_path_factory):
    # Set before Ray starts: the local raylet, and so every worker, inherits the driver's environment.
    saved = {name: os.environ.get(name) for name in (watchdog.HANG_AT_STEP_ENV, watchdog.FLOOR_ENV)}
    os.environ[watchdog.HANG_AT_STEP_ENV], os.environ[watchdog.FLOOR_ENV] = str(HANG_AT), str(FLOOR_S)
    ray = local_ray(3)
    next(ray)
    try:
        storage = tmp_path_factory.mktemp("runs")
        summary = fit(validate(TrainConfig(model="tiny", steps=STEPS, seq_len=32, micro_batch=2, data="pattern",
                                           storage_path=str(storage), run_name="hung", checkpoint_every=EVERY,
                                           workers=2, local=True, max_failures=1,
                                           # written before the next step starts: the hang right after it
                                           # cannot leave it unfinished
                                           async_checkpoint=False)))
        yield summary, Path(summary["run"])
    finally:
        next(ray, None)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_the_retry_resumes_from_the_checkpoint_before_the_hang_and_finishes(hung_run):
    summary, _ = hung_run
    assert summary["final_step"] == STEPS
    assert summary["resumed_from_step"] == EVERY


def test_both_ranks_dumped_their_stacks_into_one_attempt_folder(hung_run):
    _, run = hung_run
    attempts = list((run / watchdog.DUMP_FOLDER).iterdir())
    assert len(attempts) == 1
    # gloo's flight recorder beside the stacks (NCCL's on the cluster: rank<r>-nccl-trace.pkl)
    assert sorted(p.name for p in attempts[0].iterdir()) == ["rank0-gloo-trace.pkl", "rank0-stacks.txt",
                                                            "rank1-gloo-trace.pkl", "rank1-stacks.txt"]
    hung = (attempts[0] / "rank1-stacks.txt").read_text()
    # The watchdog polls once a second, so it fires between the bound and a poll later ("2 s" or "3 s").
    assert re.match(rf"rank 1: no progress for ({FLOOR_S}|{FLOOR_S + 1}) s waiting for step {HANG_AT} \(bound {FLOOR_S} s\)",
                    hung), hung[:80]
    assert "maybe_hang" in hung  # the injected block is on the hung rank's stack


def test_the_summary_keeps_the_health_figures(hung_run):
    summary, run = hung_run
    written = json.loads((run / "run_summary.json").read_text())
    assert written["health"]["links"] == []  # one host: no node pair
    assert written["health"]["gate_s"] < 60
