"""cdk_constructs/kuberay_cluster_rules.py case by case: ValidateRayClusterUpgradeOptions (KubeRay v1.7 validation.go)
takes a RayCluster's upgradeStrategy.type Recreate or None, and nothing else (RayService's types included)."""

from __future__ import annotations

import pytest

from cdk_constructs.kuberay_cluster_rules import ray_cluster_spec, ray_cluster_upgrade_options


def cluster(strategy: dict | None, creator: str | None = None) -> dict:
    labels = {"ray.io/originated-from-crd": creator} if creator else {}
    return {"metadata": {"name": "c", "labels": labels}, "spec": {} if strategy is None else {"upgradeStrategy": strategy}}


@pytest.mark.parametrize("kind", ["NewCluster", "NewClusterWithIncrementalUpgrade", "RollingUpdate", "recreate", ""])
def test_an_upgrade_type_other_than_recreate_or_none_is_refused(kind):
    assert ray_cluster_upgrade_options(cluster({"type": kind})) == [
        ("ValidateRayClusterUpgradeOptions", f"upgradeStrategy.type {kind!r} must be Recreate or None")]


@pytest.mark.parametrize("strategy", [None, {}, {"type": "Recreate"}, {"type": "None"}])
def test_a_users_cluster_may_recreate_or_not_upgrade_or_say_nothing(strategy):
    assert ray_cluster_upgrade_options(cluster(strategy)) == []


@pytest.mark.parametrize("creator,refused", [("RayJob", True), ("RayService", True), ("RayCronJob", False), (None, False)])
def test_only_a_cluster_a_rayjob_or_rayservice_made_may_not_set_one(creator, refused):
    found = ray_cluster_upgrade_options(cluster({"type": "Recreate"}, creator))
    assert found == ([("ValidateRayClusterUpgradeOptions", f"upgradeStrategy cannot be set on a RayCluster created by {creator}")]
                     if refused else [])


def test_a_strategy_without_a_type_is_no_strategy_even_on_a_rayjobs_cluster():
    # validation.go checks UpgradeStrategy.Type != nil before either rule.
    assert ray_cluster_upgrade_options(cluster({}, "RayJob")) == []


def autoscaled(options: dict | None, head_env: list[dict] | None = None) -> dict:
    """A RayCluster spec with the in-tree autoscaler on (autoscalerOptions as given) and a worker group that sets
    idleTimeoutSeconds: 60."""
    container = {"name": "ray-head", "image": "rayproject/ray:2.58.0", "env": head_env or []}
    spec = {"enableInTreeAutoscaling": True, "rayVersion": "2.58.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "minReplicas": 0, "maxReplicas": 2, "idleTimeoutSeconds": 60,
                                  "rayStartParams": {},
                                  "template": {"spec": {"containers": [{"name": "ray-worker", "image": "x"}]}}}]}
    if options is not None:
        spec["autoscalerOptions"] = options
    return spec


@pytest.mark.parametrize("options,head_env,refused", [
    (None, None, True),  # autoscalerOptions unset: autoscaler v1
    ({"version": "v1"}, None, True),
    ({"version": "v2"}, None, False),
    ({"version": "v1"}, [{"name": "RAY_enable_autoscaler_v2", "value": "true"}], False),
])
def test_a_worker_groups_idle_timeout_needs_autoscaler_v2_even_with_the_in_tree_autoscaler_on(options, head_env, refused):
    # validateWorkerGroupIdleTimeout (validation.go): IsAutoscalingV2Enabled (in-tree on and version v2), or
    # RAY_enable_autoscaler_v2 1/true on the head's container; the v1 autoscaler being on is not enough.
    found = [f for f in ray_cluster_spec(autoscaled(options, head_env), {}, {}) if f[0] == "validateWorkerGroupIdleTimeout"]
    assert found == ([("validateWorkerGroupIdleTimeout", "worker group gpu: idleTimeoutSeconds needs autoscaler v2")]
                     if refused else [])
