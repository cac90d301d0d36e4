"""tools/scan.py without checkov and without synthesis: what it takes out of a template, the objects it
derives from a RayJob as KubeRay does, and the gate on checkov's JSON report (a stand-in checkov
prints a fixed report, so `main`'s exit code is tested as `make scan` sees it)."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from cdk_constructs import ray_manifests as rm
from cdk_constructs.network_policies import training_network_policies
from tests.conftest import pure_workload
from tools import scan

HARDENED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
RUNTIME_DEFAULT = {"seccompProfile": {"type": "RuntimeDefault"}}

RAY_JOB = {
    "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "job-1", "namespace": "training"},
    "spec": {
        "entrypoint": "python -m training.train --storage-path=s3://BUCKET/runs",
        "submitterConfig": {"backoffLimit": 3},
        "submitterPodTemplate": {"spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False, "securityContext": RUNTIME_DEFAULT,
            "containers": [{"name": "ray-job-submitter", "image": "img:1", "securityContext": HARDENED_CONTAINER}]}},
        "rayClusterSpec": {
            "headGroupSpec": {"template": {"spec": {
                "serviceAccountName": "ray", "automountServiceAccountToken": False, "securityContext": RUNTIME_DEFAULT,
                "containers": [{"name": "ray-head", "image": "img:1", "securityContext": HARDENED_CONTAINER}]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": {
                "serviceAccountName": "ray", "automountServiceAccountToken": False, "securityContext": RUNTIME_DEFAULT,
                "containers": [{"name": "ray-worker", "image": "img:1", "securityContext": HARDENED_CONTAINER}]}}}],
        },
    },
}
ACCOUNTS = [rm.service_account_manifest("default", "training", automount_token=False),
            rm.service_account_manifest("ray", "training", automount_token=False),
            rm.service_account_manifest("other", "training", automount_token=True)]
FILES = ["serviceaccount-training-default.yaml", "serviceaccount-training-ray.yaml", "serviceaccount-training-other.yaml",
         "job-job-1.yaml", "pod-job-1-head.yaml", "pod-job-1-gpu-worker.yaml"]


def template_of(objects: list[dict]) -> dict:
    """A template as synth writes it: the job's resource a Fn::Join around the bucket's Ref."""
    before, after = json.dumps(objects, separators=(",", ":")).split("BUCKET")
    return {"Resources": {
        "Bucket1": {"Type": "AWS::S3::Bucket"},
        "Accounts": {"Type": "Custom::AWSCDK-EKS-KubernetesResource",
                     "Properties": {"Manifest": json.dumps(ACCOUNTS, separators=(",", ":"))}},
        "Job": {"Type": "Custom::AWSCDK-EKS-KubernetesResource",
                "Properties": {"Manifest": {"Fn::Join": ["", [before, {"Ref": "Bucket1"}, after]]}}},
        "Chart": {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {"Values": "{}"}},
    }}


def by_file(objects: list[scan.ScanObject]) -> dict[str, scan.ScanObject]:
    return {o.file: o for o in objects}


# ---------------------------------------------------------------- extraction


def test_placeholders_keep_the_json_valid():
    value = {"Fn::Join": ["", ['{"a":"s3://', {"Ref": "Bucket1"}, "/", {"Fn::GetAtt": ["Role1", "Arn"]}, "/",
                               {"Fn::Sub": "x"}, '"}']]}
    assert scan.placeholder(value) == '{"a":"s3://<Ref:Bucket1>/<GetAtt:Role1.Arn>/<Fn::Sub>"}'
    assert json.loads(scan.placeholder(value)) == {"a": "s3://<Ref:Bucket1>/<GetAtt:Role1.Arn>/<Fn::Sub>"}


def test_manifests_are_taken_from_kubernetes_resources_only_with_tokens_substituted():
    objects = scan.manifests(template_of([RAY_JOB]))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", "default"), ("ServiceAccount", "ray"), ("ServiceAccount", "other"), ("RayJob", "job-1")]
    assert objects[3]["spec"]["entrypoint"] == "python -m training.train --storage-path=s3://<Ref:Bucket1>/runs"


def test_an_unresolved_cdk_token_is_refused():
    template = {"Resources": {"Job": {"Type": "Custom::AWSCDK-EKS-KubernetesResource",
                                      "Properties": {"Manifest": '[{"kind":"ConfigMap","data":{"a":"${Token[TOKEN.12]}"}}]'}}}}
    with pytest.raises(scan.ScanError, match="^Job: Manifest holds an unresolved CDK token"):
        scan.manifests(template)


def test_the_objects_their_files_and_required_checks():
    objects = scan.scan_objects(scan.manifests(template_of([RAY_JOB])))
    assert [(o.file, o.role, o.required) for o in objects] == [
        ("serviceaccount-training-default.yaml", "ServiceAccount training/default", ("SA_TOKEN",)),
        ("serviceaccount-training-ray.yaml", "ServiceAccount training/ray", ("SA_TOKEN",)),
        # No pod of the job runs as it: listed, not required.
        ("serviceaccount-training-other.yaml", "ServiceAccount training/other", ()),
        ("job-job-1.yaml", "submitter Job training/job-1",
         ("CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_31", "CKV_K8S_38")),
        ("pod-job-1-head.yaml", "head Pod training/job-1-head",
         ("CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_31", "CKV_K8S_38")),
        ("pod-job-1-gpu-worker.yaml", "worker Pod (gpu) training/job-1-gpu-worker",
         ("CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_31", "CKV_K8S_38")),
    ]


def test_the_submitter_job_is_kuberays_job_around_the_template():
    job = by_file(scan.scan_objects([RAY_JOB]))["job-job-1.yaml"].manifest
    labels = {"ray.io/originated-from-cr-name": "job-1", "ray.io/originated-from-crd": "RayJob",
              "app.kubernetes.io/created-by": "kuberay-operator"}
    assert job == {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job-1", "namespace": "training", "labels": labels},
        "spec": {"backoffLimit": 3, "template": {"metadata": {"labels": labels}, "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "ray-job-submitter", "image": "img:1",
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}},
    }


def test_without_submitter_config_the_job_has_kuberays_backoff_of_two():
    ray_job = json.loads(json.dumps(RAY_JOB))
    del ray_job["spec"]["submitterConfig"]
    assert scan.submitter_job(ray_job)["spec"]["backoffLimit"] == 2


def test_ray_pods_carry_kuberays_labels_and_the_workers_init_container_copies_the_security_context():
    (head_role, head), (worker_role, worker) = scan.ray_pods(RAY_JOB)
    assert (head_role, worker_role) == ("head Pod", "worker Pod (gpu)")
    assert head["metadata"]["labels"] == {"ray.io/is-ray-node": "yes", "ray.io/cluster": "job-1",
                                          "ray.io/node-type": "head", "ray.io/group": "headgroup"}
    assert worker["metadata"]["labels"] == {"ray.io/is-ray-node": "yes", "ray.io/cluster": "job-1",
                                            "ray.io/node-type": "worker", "ray.io/group": "gpu"}
    assert "initContainers" not in head["spec"]
    assert worker["spec"]["initContainers"] == [{
        "name": "wait-gcs-ready", "image": "img:1",
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]
    # The RayJob itself is left as it was.
    assert "initContainers" not in RAY_JOB["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]


def test_the_default_deployments_submitter_and_ray_account_are_hardened():
    """From the same builders and settings as the stack (test_cluster_software proves them the synthesized ones)."""
    workload = pure_workload()
    objects = by_file(scan.scan_objects([
        rm.service_account_manifest("ray", "training", automount_token=False), workload["RayJob"]]))
    job = next(o.manifest for o in objects.values() if o.manifest["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert [c["securityContext"] for c in pod["containers"]] == [
        {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}]
    assert "serviceAccountName" not in pod  # it runs as `default`, whose token is off too (TrainingWorkload)
    ray = objects["serviceaccount-training-ray.yaml"]
    assert ray.manifest["automountServiceAccountToken"] is False and ray.required == ("SA_TOKEN",)
    assert scan.local_findings([ray]) == [
        scan.Finding("SA_TOKEN", "serviceaccount-training-ray.yaml", True, "ServiceAccount mounts no API token by default")]


def test_network_policies_come_along_unrequired():
    objects = scan.scan_objects(training_network_policies("training", "kuberay-system") + [RAY_JOB])
    assert [(o.file, o.required) for o in objects if o.manifest["kind"] == "NetworkPolicy"] == [
        ("networkpolicy-training-default-deny-ingress.yaml", ()),
        ("networkpolicy-training-ray-nodes-from-each-other.yaml", ()),
        ("networkpolicy-training-ray-head-job-api.yaml", ())]


def test_objects_are_written_one_per_file_and_stale_files_go(tmp_path):
    (tmp_path / "stale.yaml").write_text("kind: Pod\n")
    objects = scan.scan_objects(scan.manifests(template_of([RAY_JOB])))
    scan.write_objects(objects, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)
    assert yaml.safe_load((tmp_path / "serviceaccount-training-ray.yaml").read_text()) == {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ray", "namespace": "training"},
        "automountServiceAccountToken": False}


# ---------------------------------------------------------------- the gate on checkov's report


def report(failed: dict[str, list[str]] | None = None) -> dict:
    """checkov's `-o json` report for the fixture's objects: every pod check passed unless listed
    in failed (file -> check IDs), plus one other finding that must not fail the scan."""
    failed = failed or {}
    pods = ["job-job-1.yaml", "pod-job-1-head.yaml", "pod-job-1-gpu-worker.yaml"]
    rows = [(c, f, c not in failed.get(f, [])) for f in pods for c in scan.POD_CHECKS]
    rows.append(("CKV_K8S_43", "job-job-1.yaml", False))
    record = lambda c, f: {"check_id": c, "check_name": f"name of {c}", "file_path": f"/{f}", "resource": "x"}
    return {"check_type": "kubernetes", "results": {
        "passed_checks": [record(c, f) for c, f, ok in rows if ok],
        "failed_checks": [record(c, f) for c, f, ok in rows if not ok],
        "skipped_checks": [], "parsing_errors": []}}


def objects_and_findings(checkov_report) -> tuple[list[scan.ScanObject], list[scan.Finding]]:
    objects = scan.scan_objects(scan.manifests(template_of([RAY_JOB])))
    return objects, scan.checkov_findings(checkov_report) + scan.local_findings(objects)


def test_all_required_checks_passing_opens_the_gate_despite_other_findings():
    objects, findings = objects_and_findings(report())
    assert scan.gate(objects, findings) == []
    assert scan.other_lines(objects, findings) == [
        "other failed checks: 1 on 1 check IDs (listed, not refused)",
        "  CKV_K8S_43 x1: name of CKV_K8S_43 (submitter Job)"]


def test_privilege_escalation_on_the_submitter_fails_the_gate():
    objects, findings = objects_and_findings(report({"job-job-1.yaml": ["CKV_K8S_20"]}))
    assert scan.gate(objects, findings) == ["CKV_K8S_20 FAILED on submitter Job training/job-1 (job-job-1.yaml)"]


def test_a_required_check_without_a_result_fails_the_gate():
    checkov_report = report()
    checkov_report["results"]["passed_checks"] = [
        r for r in checkov_report["results"]["passed_checks"]
        if not (r["check_id"] == "CKV_K8S_31" and r["file_path"] == "/pod-job-1-head.yaml")]
    objects, findings = objects_and_findings(checkov_report)
    assert scan.gate(objects, findings) == ["CKV_K8S_31 has no result for head Pod training/job-1-head (pod-job-1-head.yaml)"]


def test_a_token_mounting_ray_account_fails_the_gate_and_an_unused_one_does_not():
    objects, findings = objects_and_findings(report())
    ray = by_file(objects)["serviceaccount-training-ray.yaml"]
    mounting = scan.ScanObject(ray.file, ray.role, {**ray.manifest, "automountServiceAccountToken": True}, ray.required)
    objects = [mounting if o.file == ray.file else o for o in objects]
    findings = scan.checkov_findings(report()) + scan.local_findings(objects)
    # `other` mounts a token too, but no pod of the job runs as it.
    assert scan.gate(objects, findings) == [
        "SA_TOKEN FAILED on ServiceAccount training/ray (serviceaccount-training-ray.yaml)"]


def test_checkov_reports_of_several_frameworks_are_read_alike():
    one = scan.checkov_findings(report())
    assert scan.checkov_findings([report(), {"check_type": "secrets", "results": {}}]) == one
    assert len(one) == 16 and scan.Finding("CKV_K8S_38", "pod-job-1-gpu-worker.yaml", True, "name of CKV_K8S_38") in one


def test_the_table_marks_required_cells():
    objects, findings = objects_and_findings(report({"job-job-1.yaml": ["CKV_K8S_20"]}))
    lines = scan.table_lines(objects, findings)
    assert lines[0].split() == ["object", "CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_31", "CKV_K8S_38", "SA_TOKEN"]
    assert lines[3].split() == ["ServiceAccount", "training/other", "-", "-", "-", "-", "-", "FAIL"]
    assert lines[4].split() == ["submitter", "Job", "training/job-1", "FAIL*", "PASS*", "PASS*", "PASS*", "PASS*", "-"]


# ---------------------------------------------------------------- main, as make scan runs it


def cloud_assembly(tmp_path, objects: list[dict]):
    out = tmp_path / "cdk.out"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"artifacts": {
        "Stack": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "Stack.template.json"}},
        "Tree": {"type": "cdk:tree"}}}))
    (out / "Stack.template.json").write_text(json.dumps(template_of(objects)))
    return out


def fake_checkov(tmp_path, checkov_report: dict):
    """Prints the given report as checkov -o json would, and a version."""
    (tmp_path / "report.json").write_text(json.dumps(checkov_report))
    script = tmp_path / "checkov"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"print('3.3.30' if '--version' in sys.argv else open({str(tmp_path / 'report.json')!r}).read())\n")
    script.chmod(0o755)
    return script


def test_make_scan_fails_on_a_submitter_that_may_escalate(tmp_path, capsys):
    out = cloud_assembly(tmp_path, [RAY_JOB])
    checkov = fake_checkov(tmp_path, report({"job-job-1.yaml": ["CKV_K8S_20"]}))
    assert scan.main([str(out), "--run", "--checkov", str(checkov)]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: CKV_K8S_20 FAILED on submitter Job training/job-1 (job-job-1.yaml)\n"
    assert "checkov 3.3.30: 19 results" in captured.out
    assert sorted(p.name for p in (out / "k8s-scan").iterdir()) == sorted(FILES)


def test_make_scan_passes_when_every_required_check_does(tmp_path, capsys):
    out = cloud_assembly(tmp_path, [RAY_JOB])
    assert scan.main([str(out), "--run", "--checkov", str(fake_checkov(tmp_path, report()))]) == 0
    assert capsys.readouterr().err == ""


def test_without_run_only_the_yaml_is_written(tmp_path, capsys):
    out = cloud_assembly(tmp_path, [RAY_JOB])
    assert scan.main([str(out), "--folder", str(tmp_path / "yaml")]) == 0
    assert capsys.readouterr().out == f"wrote 6 objects to {tmp_path / 'yaml'}\n"


def test_a_missing_cloud_assembly_is_one_line(tmp_path, capsys):
    assert scan.main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == (
        f"error: cdk.out: {tmp_path / 'nowhere'} has no manifest.json; give a synthesized cloud assembly (make synth)\n")


def test_an_assembly_without_a_rayjob_is_refused(tmp_path, capsys):
    out = cloud_assembly(tmp_path, [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "x": "BUCKET"}])
    assert scan.main([str(out)]) == 2
    assert capsys.readouterr().err == f"error: cdk.out: {out} holds no RayJob; synthesize the training stack (make synth)\n"


def test_a_missing_checkov_is_one_line(tmp_path, capsys):
    out = cloud_assembly(tmp_path, [RAY_JOB])
    assert scan.main([str(out), "--run", "--checkov", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == (
        f"error: --checkov: {tmp_path / 'none'} is not a file; give the checkov executable (make scan builds .venv-scan)\n")
