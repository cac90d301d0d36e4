"""Issue 34's infrastructure areas, each against the consumer's documented rule with a fixture where the
candidates differ: the watch's bill and teardown wait, the ServiceAccount token check, the KubeRay selector."""

from __future__ import annotations

import dataclasses

from stacks.settings import Settings


# ---------------------------------------------------------------- the watch's bill

class _FakeEc2:
    """DescribeInstances with the filters EC2 documents: tag:<key> and instance-state-name, each a list of
    values ORed, filters ANDed (EC2 API Reference, DescribeInstances, Filter)."""

    def __init__(self, instances: list[dict]):
        self.instances = instances

    def get_paginator(self, name):
        assert name == "describe_instances"
        return self

    def paginate(self, Filters):
        def keep(instance: dict) -> bool:
            for f in Filters:
                if f["Name"] == "instance-state-name":
                    value = instance["State"]["Name"]
                else:
                    value = {t["Key"]: t["Value"] for t in instance["Tags"]}.get(f["Name"].removeprefix("tag:"))
                if value not in f["Values"]:
                    return False
            return True
        return [{"Reservations": [{"Instances": [i]} for i in self.instances if keep(i)]}]


class _FakeEks:
    def list_nodegroups(self, clusterName):
        return {"nodegroups": ["system", "gpu"]}

    def describe_nodegroup(self, clusterName, nodegroupName):
        return {"nodegroup": {"labels": {"role": {"system": "system", "gpu": "gpu-worker"}[nodegroupName]},
                              "instanceTypes": [{"system": "m7i.xlarge", "gpu": "g6.12xlarge"}[nodegroupName]]}}


def _instance(state: str, group: str, cluster: str = "EksFsdpEfa") -> dict:
    return {"State": {"Name": state}, "Tags": [{"Key": "eks:cluster-name", "Value": cluster},
                                               {"Key": "eks:nodegroup-name", "Value": group}]}


def test_the_bill_counts_pending_and_running_instances_of_this_cluster_only():
    """EC2 bills an instance from running; one pending now is billed seconds later (EC2 User Guide, "Instance
    state changes": pending -> running). Terminated and stopped ones, and another cluster's group of the same
    name, do not bill here."""
    from tools import watch

    ec2 = _FakeEc2([_instance("running", "system"), _instance("pending", "gpu"), _instance("running", "gpu"),
                    _instance("terminated", "gpu"), _instance("stopped", "gpu"), _instance("shutting-down", "gpu"),
                    _instance("running", "gpu", cluster="OtherCluster")])
    session = type("Session", (), {"client": lambda self, name, region_name: {"ec2": ec2, "eks": _FakeEks()}[name]})()
    assert watch.node_groups(session, "EksFsdpEfa", "us-east-2") == [
        ("system", "m7i.xlarge", 1), ("gpu-worker", "g6.12xlarge", 2)]


# ---------------------------------------------------------------- the teardown's wait, in seconds

def _settings(ttl_seconds: int, delay_minutes: int) -> Settings:
    s = Settings()
    return dataclasses.replace(s, gpu_scale_down_delay_minutes=delay_minutes,
                               training=dataclasses.replace(s.training, ttl_seconds_after_finished=ttl_seconds))


def test_the_teardown_wait_adds_the_ttl_in_seconds_and_the_scale_down_delay_in_minutes():
    from tools import watch

    # KubeRay: ttlSecondsAfterFinished is seconds; Cluster Autoscaler's --scale-down-unneeded-time here is
    # the delay in minutes ("7m"): 45 s + 420 s + 600 s.
    assert watch.teardown_wait_seconds(_settings(ttl_seconds=45, delay_minutes=7)) == 1065


def test_the_teardown_follow_gives_up_after_its_timeout_in_seconds(monkeypatch, capsys):
    from kubernetes import client

    from tools import watch

    class Api:
        def list_namespaced_custom_object(self, *args, **kwargs):
            return {"items": []}

    sleeps = []
    clock = iter([0, 0, 59, 119, 121, 10_000])
    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: Api())
    monkeypatch.setattr(watch, "gpu_nodes", lambda api: [{"node": 1}])  # the GPU node never goes
    monkeypatch.setattr(watch.time, "sleep", sleeps.append)
    monkeypatch.setattr(watch.time, "monotonic", lambda: next(clock))
    watch.follow_teardown(None, Settings(), "training", "ft-1", poll_s=15, timeout_s=120)
    assert len(sleeps) == 3 and "still waiting after 120 s for the GPU nodes to go" in capsys.readouterr().out


# ---------------------------------------------------------------- ServiceAccount token automount

def test_a_service_account_without_the_field_fails_the_token_check():
    """Kubernetes' default: automountServiceAccountToken unset on the account and the pod mounts the token
    (Kubernetes docs, "Configure Service Accounts for Pods": opt out with automountServiceAccountToken: false)."""
    from tools import scan

    bare = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ray", "namespace": "training"}}
    explicit_true = {**bare, "automountServiceAccountToken": True}
    explicit_false = {**bare, "automountServiceAccountToken": False}
    objects = [scan.ScanObject(f"{i}.yaml", "ServiceAccount", m, (scan.SA_TOKEN,))
               for i, m in enumerate([bare, explicit_true, explicit_false])]
    assert [f.passed for f in scan.local_findings(objects)] == [False, False, True]
    assert scan.gate(objects, scan.local_findings(objects)) == [
        "SA_TOKEN FAILED on ServiceAccount (0.yaml)", "SA_TOKEN FAILED on ServiceAccount (1.yaml)"]


# ---------------------------------------------------------------- KubeRay's clusterSelector

def _selector_job(namespace: str) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "job", "namespace": namespace},
            "spec": {"clusterSelector": {"ray.io/cluster": "shared"}}}


def _cluster(namespace: str) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "shared", "namespace": namespace}}


def test_the_selector_finds_a_cluster_only_in_the_jobs_namespace():
    """rayjob_controller.go getOrCreateRayClusterInstance gets the RayCluster by name in the RayJob's own
    namespace: a cluster of that name elsewhere is not found."""
    from cdk_constructs import kuberay_rules as kr

    assert kr.cluster_selector_targets([_selector_job("training"), _cluster("training")]) == []
    [violation] = kr.cluster_selector_targets([_selector_job("training"), _cluster("other")])
    assert violation.rule == "getOrCreateRayClusterInstance" and "'shared'" in violation.message
