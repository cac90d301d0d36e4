"""The Kubernetes API server's limits under kubectl apply (tools.seams.kube)."""

from __future__ import annotations

import base64
import json

import pytest

from tools.seams import kube
from tools.seams.cfn import Resolver


def config_map(data: dict, **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "trainer", "namespace": "training", **meta}, "data": data}


def test_last_applied_holds_the_object_as_go_encodes_it():
    # kubectl apply's annotation for {"kind":"ConfigMap",...}: compact, sorted keys, HTML characters escaped,
    # a final newline (encoding/json Encoder.Encode), without the annotation itself but with the emptied map
    # (GetModifiedConfiguration sets the annotations to map[string]string{} when there were none).
    obj = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a"}, "data": {"x": "a<b&c>"}}
    stored = kube.stored_annotations(obj)
    assert stored == {kube.LAST_APPLIED:
                      '{"apiVersion":"v1","data":{"x":"a\\u003cb\\u0026c\\u003e"},"kind":"ConfigMap",'
                      '"metadata":{"annotations":{},"name":"a"}}\n'}


def test_annotation_size_is_the_sum_of_keys_and_values_in_bytes():
    # ValidateAnnotationsSize: for k, v: totalSize += len(k) + len(v), Go's len counts UTF-8 bytes.
    assert kube.annotations_size({"ab": "cde", "é": ""}) == 2 + 3 + 2


def test_a_config_map_near_the_annotation_limit_is_refused_with_its_size():
    obj = config_map({"big.py": "x" * 200_000})
    [problem] = kube.object_problems(obj)
    assert "ConfigMap training/trainer: annotations" in problem
    assert f"total {kube.annotations_size(kube.stored_annotations(obj)):,} bytes" in problem and "over 75%" in problem


def test_a_config_map_under_the_margin_passes():
    assert kube.object_problems(config_map({"small.py": "x" * 190_000})) == []


def test_escaped_characters_count_six_bytes_each():
    # 33,000 '<' are 33,000 bytes of data but 198,000 in the annotation (\u003c): over 75% of 262,144.
    assert kube.object_problems(config_map({"a.py": "x" * 100})) == []
    assert any("annotations" in p for p in kube.object_problems(config_map({"a.py": "<" * 33_000})))


def test_config_map_data_over_one_mebibyte_is_refused():
    obj = config_map({"a": "x" * (1 << 20), "b": "y"})
    assert any("data totals 1,048,577 bytes, over the 1,048,576 a ConfigMap may hold" in p
               for p in kube.object_problems(obj, applied=False))


def test_secret_data_counts_decoded_bytes():
    # ValidateSecret sums len(value) of the decoded data: 786,432 bytes are 1,048,576 in base64.
    secret = {"kind": "Secret", "metadata": {"name": "s"},
              "data": {"k": base64.b64encode(b"x" * 786_432).decode()}}
    assert kube.data_size(secret) == 786_432
    assert kube.object_problems(secret, applied=False) == []


def test_a_config_map_key_with_a_slash_is_refused():
    assert any("data key 'training/train.py'" in p
               for p in kube.object_problems(config_map({"training/train.py": ""}), applied=False))


@pytest.mark.parametrize("kind, name, ok", [
    ("ConfigMap", "a" * 253, True), ("ConfigMap", "a" * 254, False), ("ConfigMap", "a.b-c", True),
    ("ConfigMap", "A", False), ("Namespace", "a" * 63, True), ("Namespace", "a" * 64, False),
    ("Service", "a.b", False)])
def test_names(kind, name, ok):
    # IsDNS1123Subdomain (253) for most kinds; IsDNS1123Label (63) for a Namespace or a Service.
    assert (kube.name_problems(kind, name) == []) is ok


@pytest.mark.parametrize("key, value, ok", [
    ("app", "ray", True), ("ray.io/node-type", "worker", True), ("a" * 63, "", True), ("a" * 64, "", False),
    ("p" * 254 + "/x", "v", False), ("app", "v" * 64, False), ("app", "-bad", False), ("UPPER/x", "v", False)])
def test_labels(key, value, ok):
    assert (kube.label_problems({key: value}) == []) is ok


def manifest_resource(objects: list[dict]) -> dict:
    return {"Type": kube.MANIFEST_RESOURCE, "Properties": {"Manifest": json.dumps(objects), "Overwrite": True}}


def test_the_template_check_reads_every_manifest_and_names_its_resource():
    t = {"Resources": {"Job": manifest_resource([config_map({"big.py": "x" * 200_000})])}}
    [problem] = kube.problems(Resolver(t, "us-east-2"))
    assert problem.endswith("(Job)")


def test_the_synthesized_objects_stay_within_the_api_servers_limits(template):
    """Issue 30 defect 3 (fixed): the trainer ConfigMap ships as one zip, far below 262,144 bytes stored."""
    assert kube.problems(Resolver(template.to_json(), "us-east-2")) == []


def _ray_job(grace: int | None, wait: str) -> dict:
    pod = {"containers": [{"name": "ray-worker", "lifecycle": {"preStop": {"exec": {"command": [
        "python", "-m", "training.preemption", "--wait", wait]}}}}]}
    if grace is not None:
        pod["terminationGracePeriodSeconds"] = grace
    return {"kind": "RayJob", "metadata": {"name": "job"}, "spec": {"rayClusterSpec": {
        "headGroupSpec": {"template": {"spec": {"containers": []}}},
        "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": pod}}]}}}


def test_a_prestop_wait_that_outlasts_the_grace_period_is_refused():
    assert kube.hook_problems(_ray_job(60, "60")) == [
        "Kubernetes: RayJob job: group gpu: the preStop hook waits 60 s, not less than the pod's "
        "terminationGracePeriodSeconds 60: the kubelet kills it first"]


def test_without_a_grace_period_the_kubelets_30_s_count():
    assert kube.hook_problems(_ray_job(None, "45")) != []
    assert kube.hook_problems(_ray_job(None, "25")) == []


def test_a_prestop_wait_inside_the_grace_period_passes():
    assert kube.hook_problems(_ray_job(70, "65")) == []
