"""tools/scan.py: the pods it derives from a RayJob carry the names and namespace KubeRay gives them, whatever the
template's own metadata says (common/pod.go: KubeRay sets both)."""

from __future__ import annotations

from tools.scan import ray_pods


def test_a_templates_own_name_and_namespace_give_way_to_kuberays():
    template = {"metadata": {"name": "mine", "namespace": "elsewhere", "annotations": {"a": "b"}}, "spec": {"containers": []}}
    job = {"metadata": {"name": "ft-1", "namespace": "training"},
           "spec": {"rayClusterSpec": {"headGroupSpec": {"template": template}}}}
    [(role, pod)] = ray_pods(job)
    assert role == "head Pod"
    assert (pod["metadata"]["name"], pod["metadata"]["namespace"]) == ("ft-1-head", "training")
    assert pod["metadata"]["annotations"] == {"a": "b"}
