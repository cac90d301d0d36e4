"""The API server's and the kubelet's limits (tools.seams.kube), case by case: each limit held on both sides of its
boundary, each kind and pod group it applies to."""

from __future__ import annotations

import base64
import json

import pytest

from tests.infra.test_seams_kube import _ray_job, config_map
from tools.seams import kube
from tools.seams.cfn import Resolver


@pytest.mark.parametrize("size, refused", [(1 << 20, False), ((1 << 20) + 1, True)])
def test_config_map_data_may_total_exactly_one_mebibyte(size, refused):
    # ValidateConfigMap: totalSize > core.MaxSecretSize (1 MiB) is an error; exactly 1 MiB is accepted.
    found = kube.object_problems(config_map({"a": "x" * (size - 1), "b": "y"}), applied=False)
    assert any("data totals" in p for p in found) is refused


def test_a_secrets_string_data_counts_with_its_data():
    # ValidateSecret sums the decoded data; stringData is merged into data before validation.
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": base64.b64encode(b"x" * 1000).decode()},
              "stringData": {"s": "y" * (1 << 20)}}
    assert kube.data_size(secret) == 1000 + (1 << 20)
    assert any("over the 1,048,576 a Secret may hold" in p for p in kube.object_problems(secret, applied=False))


def test_binary_data_counts_its_decoded_bytes():
    # ValidateConfigMap: len(binaryData value) is the decoded bytes; 786,432 bytes are 1 MiB of base64.
    obj = {"kind": "ConfigMap", "metadata": {"name": "b"}, "binaryData": {"z": base64.b64encode(b"\0" * 786_432).decode()}}
    assert kube.data_size(obj) == 786_432 and kube.object_problems(obj, applied=False) == []


@pytest.mark.parametrize("length, ok", [(64, True), (253, True), (254, False)])
def test_a_config_map_key_may_be_253_characters(length, ok):
    # IsConfigMapKey: at most DNS1123SubdomainMaxLength (253) characters of [-._a-zA-Z0-9].
    found = kube.object_problems(config_map({"k" * length: ""}), applied=False)
    assert (not any("data key" in p for p in found)) is ok


@pytest.mark.parametrize("prefix_length, ok", [(64, True), (253, True), (254, False)])
def test_a_label_keys_prefix_may_be_a_253_character_subdomain(prefix_length, ok):
    # IsQualifiedName: the prefix is a DNS-1123 subdomain (253), the name after '/' at most 63.
    assert (kube.label_problems({"p" * prefix_length + "/x": "v"}) == []) is ok


def test_annotations_over_the_api_servers_limit_are_named_so():
    # 262,144 bytes is the API server's own limit: past it the object is refused, not only past the margin.
    [problem] = kube.object_problems(config_map({"big.py": "x" * 270_000}))
    assert problem.endswith("of the API server's 262,144: over the API server's limit")


def test_an_earlier_last_applied_annotation_is_replaced_not_counted_twice():
    # kubectl apply stores the object without its last-applied annotation in that annotation
    # (GetModifiedConfiguration): an old one on the object is replaced.
    old = config_map({"a.py": "x"}, annotations={kube.LAST_APPLIED: "z" * 100_000})
    stored = kube.stored_annotations(old)
    assert list(stored) == [kube.LAST_APPLIED] and "z" * 1000 not in stored[kube.LAST_APPLIED]


def test_a_head_groups_prestop_hook_is_held_to_its_grace_period_too():
    job = _ray_job(None, "25")
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"] = {
        "terminationGracePeriodSeconds": 10,
        "containers": [{"lifecycle": {"preStop": {"exec": {"command": ["python", "--wait", "20"]}}}}]}
    assert kube.hook_problems(job) == [
        "Kubernetes: RayJob job: group head: the preStop hook waits 20 s, not less than the pod's "
        "terminationGracePeriodSeconds 10: the kubelet kills it first"]


@pytest.mark.parametrize("grace, wait, refused", [(120, "90", False), (120, "120", True), (0, "1", True)])
def test_the_grace_period_is_the_pods_own_when_set(grace, wait, refused):
    # terminationGracePeriodSeconds on the pod replaces the 30 s default, both above and below it.
    assert bool(kube.hook_problems(_ray_job(grace, wait))) is refused


@pytest.mark.parametrize("overwrite", [True, False])
def test_a_manifest_created_without_overwrite_stores_last_applied_too(overwrite):
    # aws-cdk-lib's kubectl handler runs `kubectl apply` with Overwrite and `kubectl create --save-config` without:
    # both store kubectl.kubernetes.io/last-applied-configuration, so 200,000 bytes of data count twice either way.
    resource = {"Type": kube.MANIFEST_RESOURCE,
                "Properties": {"Manifest": json.dumps([config_map({"big.py": "x" * 200_000})]), "Overwrite": overwrite}}
    [problem] = kube.problems(Resolver({"Resources": {"Job": resource}}, "us-east-2"))
    assert "annotations (with kubectl apply's kubectl.kubernetes.io/last-applied-configuration)" in problem
