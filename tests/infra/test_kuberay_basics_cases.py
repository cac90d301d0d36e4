"""cdk_constructs/kuberay_basics.py case by case: Kubernetes' name and label rules (k8s.io/apimachinery
pkg/util/validation: IsDNS1035Label, IsDNS1123Label, IsQualifiedName, IsValidLabelValue) at every character class
and end, and the readers of the autoscaler settings."""

from __future__ import annotations

import pytest

from cdk_constructs.kuberay_basics import (autoscaling, autoscaling_v2, is_dns1035_label, is_dns1123_label,
                                           is_qualified_name, is_valid_label_value, ray_container, v2_env_on)


# DNS-1035: lower-case letters, digits and '-', starting with a letter and ending with a letter or digit.
@pytest.mark.parametrize("name,ok", [
    ("a", True), ("a1", True), ("a-b", True), ("ft-0123456789-r2", True), ("1a", False), ("-a", False),
    ("a-", False), ("A", False), ("aB", False), ("a_b", False), ("a.b", False), ("", False),
])
def test_dns1035_label(name, ok):
    assert is_dns1035_label(name) is ok


# DNS-1123 label: as DNS-1035, but it may start with a digit.
@pytest.mark.parametrize("name,ok", [
    ("a", True), ("0", True), ("1a", True), ("a-1", True), ("-a", False), ("a-", False), ("A", False),
    ("a.b", False), ("a_b", False), ("", False),
])
def test_dns1123_label(name, ok):
    assert is_dns1123_label(name) is ok


# A label value: empty, or alphanumerics at both ends with '-', '_' and '.' between; either case.
@pytest.mark.parametrize("value,ok", [
    ("", True), ("A", True), ("gpu-Worker_1.x", True), ("-a", False), ("a-", False), ("_a", False), (".a", False),
    ("a.", False), ("a b", False), ("a/b", False),
])
def test_label_value(value, ok):
    assert is_valid_label_value(value) is ok


# A label key: an optional DNS-1123 subdomain prefix (lower case, dot-separated labels) and '/', then a name like a
# label value that is not empty.
@pytest.mark.parametrize("key,ok", [
    ("A_b.c-D", True), ("_a", False), ("a_", False), ("ray.io/cluster", True), ("ray-1.io/x", True),
    ("Ray.io/x", False), ("a..b/x", False), ("a-.b/x", False), ("a.-b/x", False), ("a_b/x", False),
])
def test_label_key(key, ok):
    assert is_qualified_name(key) is ok


@pytest.mark.parametrize("spec,on,v2", [
    ({"enableInTreeAutoscaling": True, "autoscalerOptions": {"version": "v2"}}, True, True),
    ({"enableInTreeAutoscaling": True, "autoscalerOptions": {"version": "v1"}}, True, False),
    ({"enableInTreeAutoscaling": True}, True, False),
    ({"enableInTreeAutoscaling": False, "autoscalerOptions": {"version": "v2"}}, False, False),
    ({}, False, False),
])
def test_the_autoscaler_is_on_and_v2_only_as_the_spec_says(spec, on, v2):
    assert (autoscaling(spec), autoscaling_v2(spec)) == (on, v2)


@pytest.mark.parametrize("value,on", [("1", True), ("true", True), ("0", False), ("false", False), ("True", False)])
def test_autoscaler_v2_by_the_heads_environment(value, on):
    head = {"template": {"spec": {"containers": [{"name": "ray-head", "env": [{"name": "RAY_enable_autoscaler_v2",
                                                                                 "value": value}]}]}}}
    assert v2_env_on({"headGroupSpec": head}) is on


def test_the_ray_container_is_the_first():
    # KubeRay's RayContainerIndex is 0, whatever the name of the container.
    group = {"template": {"spec": {"containers": [{"name": "sidecar"}, {"name": "ray-worker"}]}}}
    assert ray_container(group) == {"name": "sidecar"}
    assert ray_container({"template": {"spec": {}}}) == {} and ray_container({}) == {}


# validation.go: token mode needs Ray 2.52.0, enableK8sTokenAuth 2.55.0, a worker group's priority 2.56.0; each
# minimum itself is accepted and the release before it refused.
@pytest.mark.parametrize("ray_version,k8s_auth,priority,refused", [
    ("2.52.0", False, False, False), ("2.51.0", False, False, True),
    ("2.55.0", True, False, False), ("2.54.0", True, False, True),
    ("2.56.0", False, True, False), ("2.55.0", False, True, True),
])
def test_each_ray_minimum_is_accepted_and_the_release_before_refused(ray_version, k8s_auth, priority, refused):
    from cdk_constructs.kuberay_cluster_rules import ray_cluster_spec

    container = {"template": {"spec": {"containers": [{"name": "ray", "image": "ray"}]}}}
    worker = {"groupName": "gpu", "minReplicas": 0, "maxReplicas": 2, **container, **({"priority": 1} if priority else {})}
    spec = {"rayVersion": ray_version, "authOptions": {"mode": "token", "enableK8sTokenAuth": k8s_auth},
            "enableInTreeAutoscaling": True, "autoscalerOptions": {"version": "v2"}, "headGroupSpec": container,
            "workerGroupSpecs": [worker]}
    assert bool(ray_cluster_spec(spec, {}, {})) is refused
