"""tools/watch.py's main wiring: the job is followed with the stack's outputs, the poll and the timeouts each in its
place, and the teardown only once the job is over."""

from __future__ import annotations

import boto3
import pytest

from stacks.context import settings_from_files
from tools import watch

from tests.conftest import ROOT

OUTPUTS = {"ClusterName": "c1", "Namespace": "ns", "RayJobName": "job1", "CheckpointBucket": "bucket1"}


@pytest.fixture
def seen(monkeypatch):
    calls = {}

    class Session:
        def client(self, service, region_name=None):
            return f"{service}@{region_name}"

    monkeypatch.setattr(boto3, "Session", Session)
    monkeypatch.setattr(watch, "stack_outputs", lambda session, s: dict(OUTPUTS))
    monkeypatch.setattr(watch, "kubernetes_api", lambda session, cluster, region: calls.update(api=(cluster, region))
                        or "api")
    monkeypatch.setattr(watch, "progress_reporter", lambda *args: "reporter")
    monkeypatch.setattr(watch, "follow_job", lambda *args: calls.update(job=args) or calls["succeeded"])
    monkeypatch.setattr(watch, "job_is_over", lambda api, namespace, job: calls["over"])
    monkeypatch.setattr(watch, "follow_teardown", lambda *args: calls.update(teardown=args))
    monkeypatch.setattr(watch, "billing_line", lambda *args: "billing")
    monkeypatch.setattr(watch, "measured_bill_line", lambda *args: "measured")
    calls.update(succeeded=True, over=True)
    return calls


def run(*argv: str) -> int:
    return watch.main(["--cdk-json", str(ROOT / "cdk.json"), *argv])


def test_the_job_is_followed_until_its_deadline_plus_half_an_hour_by_default(seen):
    s = settings_from_files(ROOT / "cdk.json", [])
    assert run("--poll", "7") == 0
    assert seen["api"] == ("c1", s.region)
    api, namespace, job, bucket, poll, timeout, reporter, _ = seen["job"]
    assert (api, namespace, job, bucket, poll, reporter) == ("api", "ns", "job1", "bucket1", 7, "reporter")
    assert timeout == s.training.active_deadline_seconds + 1800


def test_job_timeout_and_teardown_timeout_each_reach_their_own_wait(seen):
    assert run("--poll", "7", "--job-timeout", "111", "--teardown-timeout", "222") == 0
    assert seen["job"][4:6] == (7, 111)
    api, s, namespace, job, poll, after, _ = seen["teardown"]
    assert (api, namespace, job, poll, after) == ("api", "ns", "job1", 7, 222)


def test_the_teardown_waits_its_computed_time_by_default(seen):
    s = settings_from_files(ROOT / "cdk.json", [])
    run()
    assert seen["teardown"][5] == watch.teardown_wait_seconds(s)


@pytest.mark.parametrize("succeeded, over, code, teardown", [(True, True, 0, True), (False, True, 1, True),
                                                             (False, False, 1, False)])
def test_the_exit_code_is_the_jobs_and_the_teardown_is_followed_only_once_it_is_over(seen, succeeded, over, code,
                                                                                     teardown):
    seen.update(succeeded=succeeded, over=over)
    assert run() == code
    assert ("teardown" in seen) is teardown
