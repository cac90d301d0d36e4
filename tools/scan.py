"""Checkov's Kubernetes checks on what the synthesized stack makes run: `make scan`.

checkov reads Kubernetes YAML, while the stack holds its manifests as JSON strings inside the
CloudFormation template, and the pods that run are not in them at all: KubeRay makes them from the
RayJob (rayjob_controller.go createNewK8sJob: a batch/v1 Job of the RayJob's name around
spec.submitterPodTemplate; the RayCluster's head and workers from rayClusterSpec's templates). So this
tool takes the manifests out of cdk.out (deploy-time values as placeholders), writes the
ServiceAccounts and the objects KubeRay derives as YAML files, and with --run runs checkov on them
(from its own venv, .venv-scan) and refuses when a required check fails:

- on every pod (submitter Job, head, workers): CKV_K8S_20 allowPrivilegeEscalation false, CKV_K8S_28
  NET_RAW dropped, CKV_K8S_37 ALL capabilities dropped, CKV_K8S_31 seccomp RuntimeDefault, CKV_K8S_38
  no service-account token in the pod;
- on the ServiceAccounts the job's pods run as: automountServiceAccountToken false. checkov has no
  check of that for an account other than `default` (CKV_K8S_41 judges `default` only), so this tool
  makes it itself (SA_TOKEN).

Other checkov findings are listed, not refused. The extraction and the gate are pure functions of
the template and of checkov's JSON report (tests/infra/test_scan.py); only `run_checkov` runs checkov.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from cdk_constructs.network_policies import RAY_HEAD, RAY_NODE

MANIFEST_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
POD_CHECKS = ("CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_31", "CKV_K8S_38")
SA_TOKEN = "SA_TOKEN"
"""This tool's own check: a ServiceAccount with automountServiceAccountToken false."""
TABLE_CHECKS = POD_CHECKS + (SA_TOKEN,)
TABLE_KINDS = ("ServiceAccount", "Job", "Pod")
DEFAULT_CHECKOV = ".venv-scan/bin/checkov"

# What KubeRay puts on the submitter Job and its pod (rayjob_controller.go createNewK8sJob, getSubmitterTemplate).
_KUBERAY_LABELS = {"ray.io/originated-from-crd": "RayJob", "app.kubernetes.io/created-by": "kuberay-operator"}
_SUBMITTER_BACKOFF_DEFAULT = 2


class ScanError(Exception):
    """A one-line refusal: what is wrong and what is allowed."""


@dataclass(frozen=True)
class ScanObject:
    file: str
    role: str
    """What it is in the deployment, for the table: e.g. `submitter Job training/ft-...`."""
    manifest: dict
    required: tuple[str, ...]
    """The checks that must pass on it, or the scan fails."""


@dataclass(frozen=True)
class Finding:
    check_id: str
    file: str
    passed: bool
    name: str = ""


def placeholder(value) -> str:
    """A CloudFormation string value with its deploy-time parts as readable placeholders, e.g.
    `<Ref:TrainingCheckpointsC2334C8C>`: no quote or backslash, so the JSON around them stays valid."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (key, arg), = value.items()
        if key == "Fn::Join":
            separator, parts = arg
            return separator.join(placeholder(p) for p in parts)
        if key == "Ref":
            return f"<Ref:{arg}>"
        if key == "Fn::GetAtt":
            return f"<GetAtt:{'.'.join(arg) if isinstance(arg, list) else arg}>"
        return f"<{key}>"
    return "<deploy-time-value>"


def manifests(template: dict) -> list[dict]:
    """Every Kubernetes object the stack applies through the kubectl handler, in template order."""
    found = []
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") != MANIFEST_RESOURCE:
            continue
        text = placeholder(resource.get("Properties", {}).get("Manifest", "[]"))
        if "${Token[" in text:  # an unresolved CDK token: the template is not what CloudFormation receives
            raise ScanError(f"{logical_id}: Manifest holds an unresolved CDK token; synthesize again (make synth)")
        objects = json.loads(text)
        found += objects if isinstance(objects, list) else [objects]
    return found


def _name(obj: dict) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def submitter_job(ray_job: dict) -> dict:
    """The batch/v1 Job KubeRay creates for a RayJob in K8sJobMode. The command, the env and the Ray
    token KubeRay adds to the container (configureSubmitterContainer) touch no field these checks read."""
    meta, spec = ray_job["metadata"], ray_job["spec"]
    labels = {"ray.io/originated-from-cr-name": meta["name"], **_KUBERAY_LABELS}
    given = json.loads(json.dumps(spec.get("submitterPodTemplate", {})))
    metadata = given.get("metadata", {})
    template = {"metadata": {**metadata, "labels": {**metadata.get("labels", {}), **labels}}, "spec": given.get("spec", {})}
    backoff = spec.get("submitterConfig", {}).get("backoffLimit", _SUBMITTER_BACKOFF_DEFAULT)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": labels},
            "spec": {"backoffLimit": backoff, "template": template}}


def _pod(name: str, namespace: str, template: dict, labels: dict) -> dict:
    metadata = json.loads(json.dumps(template.get("metadata", {})))
    metadata["labels"] = {**metadata.get("labels", {}), **labels}
    kept = {k: v for k, v in metadata.items() if k not in ("name", "namespace")}  # KubeRay sets both
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, **kept},
            "spec": json.loads(json.dumps(template.get("spec", {})))}


def ray_pods(ray_job: dict) -> list[tuple[str, dict]]:
    """(role, Pod) of the head and of one worker per group, from the RayJob's rayClusterSpec templates
    as written, with the labels KubeRay gives them (that the NetworkPolicies select on). KubeRay also
    adds the `ray start` command, ports, env and probes, none of them a field the required checks read."""
    meta, cluster = ray_job["metadata"], ray_job["spec"].get("rayClusterSpec", {})
    name, namespace = meta["name"], meta["namespace"]
    common = {**RAY_NODE, "ray.io/cluster": name}  # the RayCluster's name is the job's plus a random suffix
    pods = []
    if "headGroupSpec" in cluster:
        pods.append(("head Pod", _pod(f"{name}-head", namespace, cluster["headGroupSpec"]["template"],
                                      {**common, **RAY_HEAD, "ray.io/group": "headgroup"})))
    for group in cluster.get("workerGroupSpecs", []):
        labels = {**common, "ray.io/node-type": "worker", "ray.io/group": group["groupName"]}
        pod = _pod(f"{name}-{group['groupName']}-worker", namespace, group["template"], labels)
        pod["spec"]["initContainers"] = pod["spec"].get("initContainers", []) + [_wait_gcs_ready(pod)]
        pods.append((f"worker Pod ({group['groupName']})", pod))
    return pods


def _wait_gcs_ready(worker: dict) -> dict:
    """The init container KubeRay adds to every worker by default (common/pod.go DefaultWorkerPodTemplate,
    ENABLE_INIT_CONTAINER_INJECTION): the Ray container's image and a copy of its securityContext, so the
    container checks judge it too."""
    ray = worker["spec"]["containers"][0]
    fixed = {"cpu": "200m", "memory": "256Mi"}
    container = {"name": "wait-gcs-ready", "image": ray["image"], "resources": {"requests": fixed, "limits": dict(fixed)}}
    if "securityContext" in ray:
        container["securityContext"] = json.loads(json.dumps(ray["securityContext"]))
    return container


def _pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]


def scan_objects(objects: list[dict]) -> list[ScanObject]:
    """The ServiceAccounts and, per RayJob, its submitter Job and Ray pods, each with its file name and
    required checks. The accounts the pods run as (`default` where a pod names none) are required. The
    NetworkPolicies come along, unrequired, so that checkov sees which pods they select (CKV2_K8S_6)."""
    pods: list[ScanObject] = []
    for ray_job in (o for o in objects if o.get("kind") == "RayJob"):
        job = submitter_job(ray_job)
        pods.append(ScanObject(f"job-{job['metadata']['name']}.yaml", f"submitter Job {_name(job)}", job, POD_CHECKS))
        for role, pod in ray_pods(ray_job):
            pods.append(ScanObject(f"pod-{pod['metadata']['name']}.yaml", f"{role} {_name(pod)}", pod, POD_CHECKS))
    used = {(p.manifest["metadata"]["namespace"], _pod_spec(p.manifest).get("serviceAccountName", "default"))
            for p in pods}
    accounts = []
    for sa in (o for o in objects if o.get("kind") == "ServiceAccount"):
        meta = sa["metadata"]
        required = (SA_TOKEN,) if (meta.get("namespace", "default"), meta["name"]) in used else ()
        accounts.append(ScanObject(f"serviceaccount-{meta.get('namespace', 'default')}-{meta['name']}.yaml",
                                   f"ServiceAccount {_name(sa)}", sa, required))
    policies = [ScanObject(f"networkpolicy-{o['metadata'].get('namespace', 'default')}-{o['metadata']['name']}.yaml",
                           f"NetworkPolicy {_name(o)}", o, ()) for o in objects if o.get("kind") == "NetworkPolicy"]
    return accounts + pods + policies


def local_findings(objects: list[ScanObject]) -> list[Finding]:
    return [Finding(SA_TOKEN, o.file, o.manifest.get("automountServiceAccountToken") is False,
                    "ServiceAccount mounts no API token by default")
            for o in objects if o.manifest.get("kind") == "ServiceAccount"]


def write_objects(objects: list[ScanObject], folder: Path) -> None:
    """One object per file, so that a checkov result maps to its object by file name; stale files go."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    for obj in objects:
        (folder / obj.file).write_text(yaml.safe_dump(obj.manifest, sort_keys=False))


def checkov_findings(report) -> list[Finding]:
    """Results of checkov's JSON report (`-o json`: one object per framework, or a list of them)."""
    findings = []
    for part in report if isinstance(report, list) else [report]:
        results = part.get("results", {})
        for key, passed in (("passed_checks", True), ("failed_checks", False)):
            findings += [Finding(r["check_id"], Path(r["file_path"]).name, passed, r.get("check_name", ""))
                         for r in results.get(key, [])]
    return findings


def gate(objects: list[ScanObject], findings: list[Finding]) -> list[str]:
    """One line per required check that failed, or that has no result at all (checkov skipped or could
    not parse the object: not a pass)."""
    problems = []
    for obj in objects:
        for check in obj.required:
            results = [f.passed for f in findings if f.file == obj.file and f.check_id == check]
            if not results:
                problems.append(f"{check} has no result for {obj.role} ({obj.file})")
            elif not all(results):
                problems.append(f"{check} FAILED on {obj.role} ({obj.file})")
    return problems


def table_lines(objects: list[ScanObject], findings: list[Finding]) -> list[str]:
    """PASS / FAIL / - (not applicable) per object and check; * marks a required check."""
    def cell(obj: ScanObject, check: str) -> str:
        results = [f.passed for f in findings if f.file == obj.file and f.check_id == check]
        mark = "*" if check in obj.required else ""
        return ("PASS" if all(results) else "FAIL") + mark if results else ("MISSING*" if mark else "-")
    objects = [o for o in objects if o.manifest.get("kind") in TABLE_KINDS]
    width = max([len(o.role) for o in objects] + [6])
    lines = [f"{'object':<{width}}  " + "  ".join(f"{c:<10}" for c in TABLE_CHECKS)]
    lines += [f"{o.role:<{width}}  " + "  ".join(f"{cell(o, c):<10}" for c in TABLE_CHECKS) for o in objects]
    return lines


def _check_order(check_id: str) -> tuple[str, int]:
    """CKV_K8S_9 before CKV_K8S_10."""
    prefix, _, number = check_id.rpartition("_")
    return (prefix, int(number)) if number.isdigit() else (check_id, 0)


def other_lines(objects: list[ScanObject], findings: list[Finding]) -> list[str]:
    """checkov's other failed checks: count and IDs, with the objects they hit."""
    short = {o.file: o.role.rsplit(" ", 1)[0] for o in objects}
    other = [f for f in findings if not f.passed and f.check_id not in TABLE_CHECKS]
    by_check: dict[str, list[Finding]] = {}
    for f in other:
        by_check.setdefault(f.check_id, []).append(f)
    lines = [f"other failed checks: {len(other)} on {len(by_check)} check IDs (listed, not refused)"]
    for check_id in sorted(by_check, key=_check_order):
        hits = by_check[check_id]
        lines.append(f"  {check_id} x{len(hits)}: {hits[0].name} ({', '.join(short.get(f.file, f.file) for f in hits)})")
    return lines


def run_checkov(checkov: str, folder: Path) -> list[Finding]:
    if not Path(checkov).is_file():
        raise ScanError(f"--checkov: {checkov} is not a file; give the checkov executable (make scan builds .venv-scan)")
    # --skip-download: no platform calls (severities and links only); results are local anyway.
    command = [checkov, "-d", str(folder), "--framework", "kubernetes", "-o", "json", "--soft-fail",
               "--skip-download", "--skip-results-upload"]
    done = subprocess.run(command, capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise ScanError(f"checkov printed no JSON report (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    errors = [e for part in (report if isinstance(report, list) else [report])
              for e in part.get("results", {}).get("parsing_errors", [])]
    if errors:  # their objects then have no result, which the gate refuses
        print(f"checkov could not parse: {', '.join(Path(e).name for e in errors)}", file=sys.stderr)
    return checkov_findings(report)


def checkov_version(checkov: str) -> str:
    return subprocess.run([checkov, "--version"], capture_output=True, text=True).stdout.strip()


def stack_templates(out: Path) -> dict[str, dict]:
    """The stack templates of a cloud assembly, by stack name."""
    manifest_file = out / "manifest.json"
    if not manifest_file.is_file():
        raise ScanError(f"cdk.out: {out} has no manifest.json; give a synthesized cloud assembly (make synth)")
    artifacts = json.loads(manifest_file.read_text()).get("artifacts", {})
    return {name: json.loads((out / a["properties"]["templateFile"]).read_text())
            for name, a in artifacts.items() if a.get("type") == "aws:cloudformation:stack"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="tools.scan", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="cdk.out", help="the synthesized cloud assembly (default cdk.out)")
    parser.add_argument("--folder", help="where the YAML goes (default <out>/k8s-scan)")
    parser.add_argument("--run", action="store_true", help="run checkov on the folder and gate on the required checks")
    parser.add_argument("--checkov", default=DEFAULT_CHECKOV, help=f"checkov executable (default {DEFAULT_CHECKOV})")
    args = parser.parse_args(argv)
    out = Path(args.out)
    folder = Path(args.folder) if args.folder else out / "k8s-scan"
    started = time.monotonic()
    try:
        objects = [o for template in stack_templates(out).values() for o in scan_objects(manifests(template))]
        if not any(o.manifest["kind"] == "Job" for o in objects):
            raise ScanError(f"cdk.out: {out} holds no RayJob; synthesize the training stack (make synth)")
        write_objects(objects, folder)
        print(f"wrote {len(objects)} objects to {folder}")
        if not args.run:
            return 0
        findings = run_checkov(args.checkov, folder) + local_findings(objects)
    except ScanError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"checkov {checkov_version(args.checkov)}: {len(findings)} results in "
          f"{time.monotonic() - started:.1f} s (* required; - not applicable)")
    for line in table_lines(objects, findings) + other_lines(objects, findings):
        print(f"  {line}")
    problems = gate(objects, findings)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
