"""The second `cdk deploy`: what a changed setting, trainer or image does to the objects that exist.

The cluster's side of a deploy is modelled from its consumers' documented behaviour, not from our code:
- CloudFormation creates the resources whose logical id is new, updates those whose properties
  changed, and deletes those that went away in its cleanup phase, after everything else succeeded.
- aws-cdk-lib's kubectl handler (the Lambda behind KubernetesManifest) runs
  `kubectl create` on Create unless the resource says Overwrite (then `kubectl apply`): a name that
  exists fails the deploy, and CloudFormation leaves behind what the failed Create had already made.
  On Update it runs `kubectl apply --prune` with the resource's prune label (dropped objects go);
  on Delete, `kubectl delete` of the resource's objects.
- KubeRay disregards a changed rayClusterSpec under an existing RayJob name
  (kuberay_rules.ignored_changes, rayjob_controller.go getOrCreateRayClusterInstance).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field

import pytest
from aws_cdk.assertions import Template

from cdk_constructs import kuberay_rules as kr
from cdk_constructs import training_workload
from tests.conftest import ROOT, resources_of, synth_stack

KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
BUCKET = "checkpoints-bucket"


def _resolved(value):
    """The template's intrinsics as they resolve on one deployed stack (the bucket keeps its name)."""
    if isinstance(value, dict):
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(_resolved(p) for p in parts)
        if "Ref" in value or "Fn::GetAtt" in value:
            return BUCKET
        return {k: _resolved(v) for k, v in value.items()}
    return value


def kubernetes_resources(template: Template) -> dict[str, dict]:
    """Logical id -> {"overwrite": bool, "objects": [manifest, ...]} of every kubectl-handler resource."""
    return {logical_id: {"overwrite": r["Properties"].get("Overwrite", False),
                         "objects": json.loads(_resolved(r["Properties"]["Manifest"]))}
            for logical_id, r in resources_of(template, KUBERNETES_RESOURCE).items()}


def key(obj: dict) -> tuple[str, str | None, str]:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


@dataclass
class Cluster:
    """What the kubectl handler leaves on the cluster: objects by (kind, namespace, name)."""

    objects: dict[tuple, dict] = field(default_factory=dict)

    def deploy(self, before: dict[str, dict], after: dict[str, dict]) -> list[str]:
        """One CloudFormation update from `before` to `after`; returns what went wrong."""
        problems = []
        for logical_id, resource in after.items():
            if logical_id in before:
                continue
            for obj in resource["objects"]:  # Create: kubectl create (or apply with Overwrite)
                if key(obj) in self.objects and not resource["overwrite"]:
                    problems.append(f"{logical_id}: kubectl create {key(obj)}: AlreadyExists")
                self.objects.setdefault(key(obj), obj)
        for logical_id, resource in after.items():
            old = before.get(logical_id)
            if old is None or old["objects"] == resource["objects"]:
                continue
            problems += [v.line() for v in kr.ignored_changes(old["objects"], resource["objects"])]
            for obj in old["objects"]:  # Update: apply --prune
                self.objects.pop(key(obj), None)
            self.objects.update({key(o): o for o in resource["objects"]})
        if problems:
            return problems  # CloudFormation rolls back; the cleanup phase never runs
        for logical_id, resource in before.items():
            if logical_id not in after:
                for obj in resource["objects"]:  # cleanup: kubectl delete
                    self.objects.pop(key(obj), None)
        return problems


def deployed(**overrides) -> dict[str, dict]:
    return kubernetes_resources(Template.from_stack(synth_stack(**overrides)))


def workload_names(resources: dict[str, dict]) -> set[tuple]:
    return {key(o) for r in resources.values() for o in r["objects"] if o["kind"] in ("RayJob", "ConfigMap")}


@pytest.fixture(scope="module")
def first():
    return deployed()


@pytest.fixture
def edited_trainer(tmp_path, monkeypatch):
    """A copy of the Python packages with one file edited (a path under the repository), as a developer would
    between deploys; the stack ships the copy's trainer."""
    def edit(path: str):
        for name in ("training", "planning", "benchmarks"):
            shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        (tmp_path / path).write_text((tmp_path / path).read_text() + "\n# edited\n")
        monkeypatch.setattr(training_workload, "TRAINER_PACKAGE", tmp_path / "training")
    return edit


def second_deploy(first: dict, second: dict) -> Cluster:
    cluster = Cluster()
    assert cluster.deploy({}, first) == []
    assert cluster.deploy(first, second) == []
    return cluster


def test_the_model_catches_the_shared_configmap_of_the_old_layout():
    """The failure a review found: two resources carrying a ConfigMap of one name (`trainer-<hash>`)."""
    configmap = {"kind": "ConfigMap", "metadata": {"name": "trainer-abc", "namespace": "training"}}
    old = {"RayClusterA": {"overwrite": False, "objects": [configmap, {"kind": "RayCluster", "metadata": {"name": "a"}}]}}
    new = {"RayClusterB": {"overwrite": False, "objects": [configmap, {"kind": "RayCluster", "metadata": {"name": "b"}}]}}
    cluster = Cluster()
    cluster.deploy({}, old)
    assert cluster.deploy(old, new) == ["RayClusterB: kubectl create ('ConfigMap', 'training', 'trainer-abc'): AlreadyExists"]
    assert ("RayCluster", None, "b") in cluster.objects  # left behind, untracked


def test_a_deploy_after_a_failed_one_applies_the_job_it_left_behind(first):
    """A Create that failed midway leaves its objects, untracked; the same job deployed again takes them over."""
    [job_id] = [k for k, r in first.items() if any(o["kind"] == "RayJob" for o in r["objects"])]
    assert first[job_id]["overwrite"] is True
    cluster = Cluster({key(o): o for o in first[job_id]["objects"]})
    assert cluster.deploy({}, first) == []


def test_same_settings_change_nothing(first):
    assert deployed() == first


@pytest.mark.parametrize("change", [
    {"training.steps": 300},
    {"training.image": "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.3"},
    {"gpu_node_count": 4},
    {"training.rerun": 1},
    {"training.ttl_seconds_after_finished": 60},
    {"training.active_deadline_seconds": 7200},
    {"training.backoff_limit": 0},
    {"gpu_node_taint": False},
])
def test_a_changed_setting_replaces_the_job_shares_nothing_and_leaves_no_orphan(first, change):
    second = deployed(**change)
    cluster = second_deploy(first, second)
    assert set(cluster.objects) == {key(o) for r in second.values() for o in r["objects"]}  # nothing of the old job left
    assert workload_names(first).isdisjoint(workload_names(second))  # the ConfigMap too


def test_a_changed_trainer_replaces_the_job_and_its_configmap(first, edited_trainer):
    edited_trainer("training/train.py")
    second = deployed()
    cluster = second_deploy(first, second)
    assert set(cluster.objects) == {key(o) for r in second.values() for o in r["objects"]}
    assert workload_names(first).isdisjoint(workload_names(second))


def test_the_scale_down_delay_changes_no_job(first):
    assert deployed(gpu_scale_down_delay_minutes=10) == first


def test_editing_the_benchmark_changes_nothing_on_the_cluster(first, edited_trainer):
    edited_trainer("benchmarks/bench.py")
    assert deployed() == first


def test_back_to_the_first_settings_creates_their_job_again(first):
    """A -> B -> A: B's deploy deleted A's objects, so A's names are free again."""
    second = deployed(**{"training.steps": 300})
    cluster = second_deploy(first, second)
    assert cluster.deploy(second, first) == []
    assert set(cluster.objects) == {key(o) for r in first.values() for o in r["objects"]}


def _job(resources: dict) -> dict:
    [job] = [o for r in resources.values() for o in r["objects"] if o["kind"] == "RayJob"]
    return job


def test_a_new_image_resumes_the_same_run_and_a_rerun_starts_a_new_one(first):
    image = _job(deployed(**{"training.image": "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.3"}))
    rerun = _job(deployed(**{"training.rerun": 1}))
    run = _job(first)["metadata"]["labels"]["eks-fsdp-efa/run"]
    assert image["metadata"]["labels"]["eks-fsdp-efa/run"] == run  # same folder: resumes from its checkpoints
    assert rerun["metadata"]["labels"]["eks-fsdp-efa/run"] == run + "-r1"
    assert f"--run-name={run}-r1" in rerun["spec"]["entrypoint"]


def test_the_job_names_its_configmap(first):
    job = _job(first)
    [configmap] = [o for r in first.values() for o in r["objects"] if o["kind"] == "ConfigMap"
                   and o["metadata"]["name"].startswith("ft-")]
    assert configmap["metadata"]["name"] == job["metadata"]["name"] + "-trainer"
    volumes = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["volumes"]
    assert {"name": "trainer", "configMap": configmap["metadata"]["name"]}.items() <= {
        "name": volumes[0]["name"], "configMap": volumes[0]["configMap"]["name"]}.items()


@pytest.mark.parametrize("rerun", [0, 999])
def test_names_fit_kuberay_limits(rerun):
    """A RayJob's name is at most 47 characters (ValidateRayJobMetadata): KubeRay adds 6 for its cluster."""
    job = _job(deployed(**{"training.rerun": rerun}))
    assert len(job["metadata"]["name"]) <= kr.MAX_RAY_JOB_NAME and kr.is_dns1035_label(job["metadata"]["name"])
