"""tools.seams.fake_node.namespaces_work: a machine without unshare, or where it cannot run, is told apart (the
shell part is then not run) instead of failing the check."""

from __future__ import annotations

import subprocess

import pytest

from tools.seams import fake_node


@pytest.fixture
def fresh_probe():
    # namespaces_work is cached for the process: each row probes afresh and leaves no answer behind.
    fake_node.namespaces_work.cache_clear()
    yield
    fake_node.namespaces_work.cache_clear()


def test_without_unshare_namespaces_do_not_work(fresh_probe, monkeypatch):
    monkeypatch.setattr(fake_node.shutil, "which", lambda name, *args, **kwargs: None)
    assert fake_node.namespaces_work() is False


@pytest.mark.parametrize("error", [OSError(8, "Exec format error"), subprocess.TimeoutExpired("unshare", 10)])
def test_an_unshare_that_cannot_run_or_hangs_means_namespaces_do_not_work(error, fresh_probe, monkeypatch):
    def run(*args, **kwargs):
        raise error

    monkeypatch.setattr(fake_node.shutil, "which", lambda name, *args, **kwargs: "/usr/bin/unshare")
    monkeypatch.setattr(fake_node.subprocess, "run", run)
    assert fake_node.namespaces_work() is False


@pytest.mark.parametrize("returncode, works", [(0, True), (1, False)])
def test_namespaces_work_exactly_when_an_unprivileged_unshare_runs_true(returncode, works, fresh_probe, monkeypatch):
    asked = []

    def run(argv, **kwargs):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, returncode)

    monkeypatch.setattr(fake_node.shutil, "which", lambda name, *args, **kwargs: "/usr/bin/unshare")
    monkeypatch.setattr(fake_node.subprocess, "run", run)
    assert fake_node.namespaces_work() is works
    # The namespaces the chroot needs (user mapped to root, mount, PID) are the ones probed.
    assert asked == [["/usr/bin/unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child",
                      "true"]]
