"""tests.process_group.spawn: GPU workers start as fresh interpreters, never as children of the fork server."""

from __future__ import annotations

import sys

import pytest

from tests.process_group import FORKSERVER_PRELOAD, spawn


def _report_preloaded(rank: int, out: str) -> None:
    # What this worker found imported before its own code ran: the fork server's preloads, if forked from it.
    with open(out, "w") as f:
        f.write(" ".join(m for m in FORKSERVER_PRELOAD if m in sys.modules and m != "torch"))


@pytest.mark.parametrize("cuda", [False, True])
def test_cuda_workers_start_fresh_not_from_the_fork_server_that_imported_torch_and_the_trainer(tmp_path, cuda):
    # A child of a process that initialised CUDA cannot use it: forked from the fork server, test_fp8_state's GPU
    # workers failed at start-up. This module imports none of the trainer, so a fresh worker holds none of it.
    out = tmp_path / "preloaded"
    spawn(_report_preloaded, args=(str(out),), cuda=cuda)
    assert set(out.read_text().split()) == (set() if cuda else set(FORKSERVER_PRELOAD) - {"torch"})
