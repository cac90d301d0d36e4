"""cdk_constructs/kuberay_cluster_rules.py case by case: ValidateRayClusterUpgradeOptions (KubeRay v1.7 validation.go)
takes a RayCluster's upgradeStrategy.type Recreate or None, and nothing else (RayService's types included)."""

from __future__ import annotations

import pytest

from cdk_constructs.kuberay_cluster_rules import ray_cluster_upgrade_options


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
