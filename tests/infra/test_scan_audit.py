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


def _job_object():
    from tools.scan import POD_CHECKS, ScanObject

    return ScanObject("job-ft-1.yaml", "submitter Job training/ft-1", {"kind": "Job"}, POD_CHECKS)


def test_a_required_check_that_fails_once_fails_even_where_it_also_passed():
    # checkov reports a check per resource it finds in a file: one failing result is a failure.
    from tools.scan import Finding, gate, table_lines

    obj = _job_object()
    findings = [Finding(check, obj.file, True) for check in obj.required]
    findings.append(Finding("CKV_K8S_20", obj.file, False))
    assert gate([obj], findings) == ["CKV_K8S_20 FAILED on submitter Job training/ft-1 (job-ft-1.yaml)"]
    assert table_lines([obj], findings)[1].split()[3:5] == ["FAIL*", "PASS*"]  # CKV_K8S_20, CKV_K8S_28


def test_other_checks_are_listed_in_numeric_order():
    from tools.scan import Finding, other_lines

    obj = _job_object()
    findings = [Finding(check, obj.file, False, name) for check, name in
                (("CKV_K8S_10", "cpu requests"), ("CKV_K8S_9", "readiness probe"), ("CKV2_K8S_6", "network policy"))]
    assert [line.split()[0] for line in other_lines([obj], findings)[1:]] == ["CKV2_K8S_6", "CKV_K8S_9", "CKV_K8S_10"]
