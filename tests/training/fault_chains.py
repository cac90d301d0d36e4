"""The fault matrix's chains and how they are read (docs/testing.md, "Fault matrix").

A chain is one run whose faults (training/faults.py: fired once per run, at the start of a step) follow each other,
each ending an attempt that Ray Train restarts; a restart costs seconds (new worker processes), a run with its own
uninterrupted twin more, so one chain holds several cells. Each cell asserts the step its retry resumed from, that
the steps trained (per step, the last attempt's) held exactly the uninterrupted run's rows (row digests,
training.faults.RowLog: none twice, none skipped), and the losses.

Every chain runs test_train_ray's uninterrupted settings (pattern data, 2 workers x 2 rows x 2 micro-batches,
24 steps) with a checkpoint every EVERY steps: how often it saves changes nothing the run computes.
Fault kinds: nan, raise, hang, kill, sigterm, storage, prestop; moments: slow (a save still in flight: its upload on
the last rank held back 8 s), settle (every save committed first: just after a hand-over), or neither (before
the first checkpoint). The fourth moment, after an epoch boundary with the next attempt on another number of
workers, needs real data: test_train_ray_sft's stopped_and_resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from training import faults, preemption

EVERY = 4
WATCHDOG_S = 6.0
"""The hang cells' bound: steps here take well under a second, but with a save in flight on a loaded 2-core machine a
step took over 3 s, and a 3 s bound fired on it; a hang fires 6 s after the last step."""

# name: (faults, the step each retry resumed from, in order). `core` runs in make test; the others are marked.
CHAINS = {
    # Every fault once. An exception before the first checkpoint; NaN while step 4's save is in flight; step 8's
    # upload refused on rank 1, then rank 1 killed at step 9 (--inject-failure-at-step 9; one attempt: the partial
    # step 8 is passed over and named, which is what both cells assert; the refused rank's own stop is the `first`
    # chain's); SIGTERM just after step 8's hand-over; a hang while step 12's save is in flight; the preStop hook
    # (no restart).
    "core": ("raise@2,slow@4,nan@5,storage@8,drain@9,settle@10,sigterm@10,slow@12,hang@13,prestop@14",
             [0, 4, 4, 10, 12]),
    "first": ("raise@1,kill@1,hang@2,nan@3,storage@4", [0, 0, 0, 0, 0]),
    "first_sigterm": ("sigterm@2", [2]),
    "pending": ("slow@4,kill@5,slow@8,raise@9,slow@12,sigterm@13,storage@16,settle@17,slow@20,nan@21",
                [0, 8, 13, 13, 20]),
    "handed": ("settle@5,nan@5,settle@6,kill@6,settle@9,hang@9,settle@10,raise@10,storage@12,settle@14,sigterm@14",
               [4, 4, 8, 8, 8, 14]),
}


@contextlib.contextmanager
def fault_environment(root: Path):
    """Every chain's faults, the row log and a stop folder of its own, in the environment before Ray starts (the
    workers inherit it)."""
    names = (faults.FAULTS_ENV, faults.ROW_LOG_ENV, preemption.STOP_DIR_ENV)
    saved = {name: os.environ.get(name) for name in names}
    os.environ[faults.FAULTS_ENV] = ";".join(f"{name}={spec}" for name, (spec, _) in CHAINS.items())
    os.environ[faults.ROW_LOG_ENV] = str(root / "rows")
    os.environ[preemption.STOP_DIR_ENV] = str(root / "stop")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def row_log(root: Path, name: str) -> list[dict]:
    return [json.loads(line) for rank in sorted((root / "rows" / name).glob("rank*.jsonl"))
            for line in rank.read_text().splitlines()]


def attempts(records: list[dict]) -> list[dict]:
    """Each attempt's resume record (rank 0's: the step it resumed from and the lines that said why), in order."""
    found = {r["attempt"]: r for r in records if "resumed_from" in r}
    return [found[a] for a in sorted(found)]


def trained_rows(records: list[dict]) -> dict[int, list[str]]:
    """Per step, the rows of the last attempt that trained it, over every rank: what the model learned from."""
    last: dict[int, str] = {}
    for r in records:
        if "step" in r and r["attempt"] >= last.get(r["step"], ""):
            last[r["step"]] = r["attempt"]
    steps: dict[int, list[str]] = {}
    for r in records:
        if "step" in r and r["attempt"] == last[r["step"]]:
            steps.setdefault(r["step"], []).extend(r["rows"])
    return {step: sorted(rows) for step, rows in sorted(steps.items())}


def losses(run: Path) -> dict[int, float]:
    from training.records import METRICS_FILE, read_metrics

    return {r["step"]: r["loss"] for r in read_metrics((run / METRICS_FILE).read_text())}


def outcome(root: Path, summary: dict) -> dict:
    """What a run left: its summary, folder, attempts, rows per step and losses per step."""
    run = Path(summary["run"])
    records = row_log(root, run.name)
    return {"summary": summary, "run": run, "attempts": attempts(records), "rows": trained_rows(records),
            "losses": losses(run)}
