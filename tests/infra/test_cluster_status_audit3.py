"""tools/cluster_status.py's reading of a trainer log cut mid-line: a run summary whose JSON is cut short is no
summary (not a crash of the watch), and the lines after it are still read."""

from __future__ import annotations

from tools import cluster_status as cs


def test_a_cut_run_summary_is_no_summary_and_the_later_lines_still_count():
    progress = cs.trainer_progress([
        'run summary: {"run": "s3://bucket/runs/ft-1", "tokens_per_s": }',
        "NCCL transport: EFA (libfabric, 1 NIC)",
        "RuntimeError: NCCL timeout",
    ])
    assert progress.summary is None
    assert progress.transport == "EFA (libfabric, 1 NIC)"
    assert progress.errors == ["RuntimeError: NCCL timeout"]


def test_a_whole_run_summary_after_a_cut_one_is_kept():
    progress = cs.trainer_progress(['run summary: {"run": "s3://b/runs/x"', 'run summary: {"run": "s3://b/runs/x"}'])
    assert progress.summary == {"run": "s3://b/runs/x"}


def test_an_event_that_happens_again_is_printed_again_once():
    # Kubernetes folds a repeated event into one object (same uid) and raises its count: each new count is news (the
    # autoscaler still finds no capacity), a poll that sees the same count again is not.
    def event(count):
        return {"reason": "NotTriggerScaleUp", "count": count, "metadata": {"uid": "u1"},
                "lastTimestamp": f"2026-12-01T09:0{count}:00Z", "involvedObject": {"name": "worker-0"},
                "message": "pod didn't trigger scale-up"}

    seen: set = set()
    assert cs.lifecycle_lines([event(1)], seen) == ["no scale-up: worker-0: pod didn't trigger scale-up"]
    assert cs.lifecycle_lines([event(1)], seen) == []
    assert cs.lifecycle_lines([event(2)], seen) == ["no scale-up: worker-0: pod didn't trigger scale-up"]
