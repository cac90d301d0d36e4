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
