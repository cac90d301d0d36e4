"""cdk_constructs/kuberay_rules.py case by case: the rules across objects look a RayJob's cluster up in the job's own
namespace (rayjob_controller.go getOrCreateRayClusterInstance gets the RayCluster by namespace and name)."""

from __future__ import annotations

from cdk_constructs import kuberay_rules as kr


def cluster(name: str, namespace: str) -> dict:
    return {"kind": "RayCluster", "metadata": {"name": name, "namespace": namespace}, "spec": {}}


def selecting_job(target: str, namespace: str = "training") -> dict:
    return {"kind": "RayJob", "metadata": {"name": "job", "namespace": namespace},
            "spec": {"clusterSelector": {"ray.io/cluster": target}}}


def owning_job(namespace: str, replicas: int) -> dict:
    return {"kind": "RayJob", "metadata": {"name": "job", "namespace": namespace},
            "spec": {"rayClusterSpec": {"workerGroupSpecs": [{"replicas": replicas}]}}}


def test_a_selected_cluster_in_the_jobs_namespace_is_found():
    assert kr.cluster_selector_targets([cluster("shared", "training"), selecting_job("shared")]) == []


def test_a_selected_cluster_of_that_name_in_another_namespace_is_not_the_jobs():
    [violation] = kr.cluster_selector_targets([cluster("shared", "other"), selecting_job("shared")])
    assert (violation.kind, violation.name, violation.rule) == ("RayJob", "job", "getOrCreateRayClusterInstance")
    assert violation.message == "clusterSelector names RayCluster 'shared', which these manifests do not create"


def test_a_job_of_the_same_name_in_another_namespace_is_another_job():
    assert kr.ignored_changes([owning_job("team-a", 2)], [owning_job("team-b", 3)]) == []
    assert [v.name for v in kr.ignored_changes([owning_job("team-a", 2)], [owning_job("team-a", 3)])] == ["job"]


def test_an_unchanged_job_is_no_ignored_change():
    assert kr.ignored_changes([owning_job("team-a", 2)], [owning_job("team-a", 2)]) == []
