"""The workload's Kubernetes objects in full, from the pure builders (cdk_constructs/ray_manifests.py).

What ships is spelled out here field by field: a changed key, value or default shows up as a failed
test, not as an object that KubeRay or the API server treats differently after `cdk deploy`
(test_cluster_software checks the same objects against the CRDs and the API's schemas, and proves
the synthesized stack holds exactly these).
"""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from cdk_constructs import ray_manifests as rm
from tests.conftest import pure_workload

IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
COMMON_ENV = [{"name": "PYTHONPATH", "value": "/opt/trainer"}, {"name": "HF_HOME", "value": "/mnt/model-cache"},
              {"name": "TOKENIZERS_PARALLELISM", "value": "false"}, {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
              {"name": "AWS_REGION", "value": "us-east-2"}, {"name": "AWS_DEFAULT_REGION", "value": "us-east-2"}]
SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
PRE_STOP = {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}}
TRAINER_MOUNT = {"name": "trainer", "mountPath": "/opt/trainer", "readOnly": True}


def spec(**overrides) -> rm.RayClusterSpec:
    base = rm.RayClusterSpec(name_prefix="fsdp", namespace="training", image=IMAGE, service_account="ray",
                             trainer_files={"training/train.py": "import training.step\n", "training/step.py": "x = 1\n"},
                             worker_replicas=2, gpus_per_worker=4, efa_per_worker=1, cpu_per_worker=40,
                             memory_gib_per_worker=160, region="us-east-2")
    return dataclasses.replace(base, **overrides)


def head_of(cluster: dict) -> dict:
    return cluster["spec"]["headGroupSpec"]


def worker_of(cluster: dict) -> dict:
    return cluster["spec"]["workerGroupSpecs"][0]


def test_cluster_spec_in_full():
    cluster = rm.ray_cluster_manifest(spec())
    s = spec()
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    assert cluster["metadata"] == {"name": cluster["metadata"]["name"], "namespace": "training"}
    assert cluster["metadata"]["name"].startswith("fsdp-") and len(cluster["metadata"]["name"]) == len("fsdp-") + 10
    assert set(cluster["spec"]) == {"rayVersion", "authOptions", "headGroupSpec", "workerGroupSpecs"}
    assert cluster["spec"]["rayVersion"] == "2.58.0" and cluster["spec"]["authOptions"] == {"mode": "token"}
    head = head_of(cluster)
    assert head["serviceType"] == "ClusterIP" and head["rayStartParams"] == {"num-gpus": "0", "dashboard-host": "0.0.0.0"}
    assert head["template"]["metadata"] == {"annotations": {"eks-fsdp-efa/trainer-hash": s.trainer_hash}}
    worker = worker_of(cluster)
    assert {k: v for k, v in worker.items() if k != "template"} == {
        "groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2, "rayStartParams": {"num-gpus": "4"}}
    assert worker["template"]["metadata"] == {"annotations": {"eks-fsdp-efa/trainer-hash": s.trainer_hash}}


def test_head_pod_in_full():
    s = spec()
    pod = head_of(rm.ray_cluster_manifest(s))["template"]["spec"]
    assert pod == {
        "serviceAccountName": "ray", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {"role": "system"},
        "containers": [{
            "name": "ray-head", "image": IMAGE,
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}},
            # The head runs on a CPU node: the image's NVIDIA hook must be told there is no GPU.
            "env": COMMON_ENV + [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
            "volumeMounts": [TRAINER_MOUNT, {"name": "dshm", "mountPath": "/dev/shm"}],
            "securityContext": SECURITY, "lifecycle": PRE_STOP}],
        "volumes": [
            {"name": "trainer", "configMap": {"name": s.configmap_name, "items": [
                {"key": "training__train.py", "path": "training/train.py"},
                {"key": "training__step.py", "path": "training/step.py"}]}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "3Gi"}}],
    }


def test_worker_pod_in_full():
    s = spec()
    pod = worker_of(rm.ray_cluster_manifest(s))["template"]["spec"]
    resources = {"cpu": "40", "memory": "160Gi", "nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"}
    assert pod == {
        "serviceAccountName": "ray", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        "containers": [{
            "name": "ray-worker", "image": IMAGE, "resources": {"requests": resources, "limits": resources},
            "env": COMMON_ENV + [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "NCCL_NET_PLUGIN", "value": "ofi"},
                                 {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}, {"name": "NCCL_DEBUG", "value": "INFO"}],
            "volumeMounts": [TRAINER_MOUNT, {"name": "dshm", "mountPath": "/dev/shm"},
                             {"name": "model-cache", "mountPath": "/mnt/model-cache"}],
            "securityContext": SECURITY, "lifecycle": PRE_STOP}],
        "volumes": [
            {"name": "trainer", "configMap": {"name": s.configmap_name, "items": [
                {"key": "training__train.py", "path": "training/train.py"},
                {"key": "training__step.py", "path": "training/step.py"}]}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
            {"name": "model-cache", "emptyDir": {"sizeLimit": "100Gi"}}],
    }


def test_an_untainted_gpu_node_needs_no_toleration():
    assert worker_of(rm.ray_cluster_manifest(spec(gpu_taint=False)))["template"]["spec"]["tolerations"] == []


def test_the_hugging_face_token_comes_by_reference_and_extra_env_follows():
    cluster = rm.ray_cluster_manifest(spec(hf_token_secret="hf", extra_env={"NCCL_ALGO": "Ring"}))
    for group in (head_of(cluster), worker_of(cluster)):
        env = group["template"]["spec"]["containers"][0]["env"]
        assert env[-2:] == [{"name": "NCCL_ALGO", "value": "Ring"},
                            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]


def test_without_a_region_no_aws_region_is_set():
    env = worker_of(rm.ray_cluster_manifest(spec(region=None)))["template"]["spec"]["containers"][0]["env"]
    assert not [e for e in env if e["name"] in ("AWS_REGION", "AWS_DEFAULT_REGION")]


@pytest.mark.parametrize("change", [
    {"image": IMAGE + "-2"}, {"worker_replicas": 3}, {"gpus_per_worker": 8}, {"efa_per_worker": 32},
    {"cpu_per_worker": 30}, {"memory_gib_per_worker": 100}, {"gpu_taint": False}, {"shm_gib": 16},
    {"model_cache_gib": 50}, {"head_cpu": 4}, {"head_memory_gib": 16}, {"head_shm_gib": 2}, {"ray_version": "2.59.0"},
    {"region": "us-west-2"}, {"hf_token_secret": "hf"}, {"extra_env": {"A": "1"}}, {"service_account": "other"},
    {"trainer_files": {"training/train.py": "pass\n"}},
])
def test_any_change_names_a_new_cluster_and_the_same_spec_the_same_one(change):
    name = rm.ray_cluster_manifest(spec())["metadata"]["name"]
    assert rm.ray_cluster_manifest(spec())["metadata"]["name"] == name
    assert rm.ray_cluster_manifest(spec(**change))["metadata"]["name"] != name


def test_digest_is_a_stable_sha256_prefix_of_sorted_json():
    assert rm.digest({"b": 1, "a": [1, 2]}) == rm.digest({"a": [1, 2], "b": 1}) == "94a786c366"
    assert len(rm.digest("x")) == rm.DIGEST_CHARS == 10


def test_job_in_full():
    job_spec = rm.RayJobSpec(namespace="training", ray_cluster_name="fsdp-0123456789",
                             trainer_options={"model": "tiny", "steps": 5, "compile": False, "require_efa": True,
                                              "model_revision": None},
                             trainer_hash="abc", storage_path="s3://b/runs", active_deadline_seconds=600,
                             submitter_backoff_limit=1)
    run = job_spec.run_name
    assert run == "ft-" + rm.digest([job_spec.trainer_options, "abc"])
    assert job_spec.name == f"{run}-012345"
    assert rm.ray_job_manifest(job_spec) == {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": f"{run}-012345", "namespace": "training", "labels": {"eks-fsdp-efa/run": run},
                     "annotations": {"eks-fsdp-efa/trainer-hash": "abc"}},
        "spec": {
            "entrypoint": f"python -m training.train --model=tiny --steps=5 --no-compile --require-efa "
                          f"--storage-path=s3://b/runs --run-name={run} --cache-dir=/mnt/model-cache",
            "clusterSelector": {"ray.io/cluster": "fsdp-0123456789"}, "submissionMode": "K8sJobMode",
            "activeDeadlineSeconds": 600, "submitterConfig": {"backoffLimit": 1}},
    }


def test_job_defaults():
    job_spec = rm.RayJobSpec(namespace="n", ray_cluster_name="c-1", trainer_options={}, trainer_hash="h", storage_path="/r")
    job = rm.ray_job_manifest(job_spec)
    assert job["spec"]["activeDeadlineSeconds"] == 4 * 3600 and job["spec"]["submitterConfig"] == {"backoffLimit": 2}
    assert job_spec.cache_dir == "/mnt/model-cache"


def test_the_storage_path_is_not_part_of_any_name():
    a, b = (rm.RayJobSpec(namespace="n", ray_cluster_name="c-1", trainer_options={"steps": 1}, trainer_hash="h",
                          storage_path=path) for path in ("s3://one/runs", "s3://two/runs"))
    assert (a.run_name, a.name) == (b.run_name, b.name)


@pytest.mark.parametrize("options,expected", [
    ({"steps": 3}, "python -m training.train --steps=3"),
    ({"reshard_after_forward": False}, "python -m training.train --no-reshard-after-forward"),
    ({"compile": True}, "python -m training.train --compile"),
    ({"model_revision": None}, "python -m training.train"),
    ({"data": "/mnt/my data.jsonl"}, "python -m training.train '--data=/mnt/my data.jsonl'"),
    ({"lr": 2e-05, "val_fraction": 0.0}, "python -m training.train --lr=2e-05 --val-fraction=0.0"),
])
def test_entrypoint_flags(options, expected):
    assert rm.train_entrypoint(options) == expected
    assert shlex.split(expected)[:3] == ["python", "-m", "training.train"]


def test_configmap_in_full():
    files = {"training/train.py": "print(1)\n", "training/__init__.py": ""}
    assert rm.trainer_configmap("trainer-x", "training", files) == {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "trainer-x", "namespace": "training",
                     "annotations": {"eks-fsdp-efa/trainer-hash": rm.content_hash(files)}},
        "data": {"training__train.py": "print(1)\n", "training____init__.py": ""},
    }


def test_configmap_at_the_limit_passes_and_one_byte_over_is_refused():
    key = "training__big.py"
    at_limit = {"training/big.py": "x" * (rm.CONFIGMAP_LIMIT_BYTES - len(key))}
    rm.trainer_configmap("t", "n", at_limit)
    over = {"training/big.py": at_limit["training/big.py"] + "x"}
    with pytest.raises(ValueError, match=r"^trainer ConfigMap: 1048577 bytes exceeds Kubernetes' 1 MiB limit$"):
        rm.trainer_configmap("t", "n", over)


def test_configmap_size_counts_encoded_bytes():
    key = "training__u.py"
    text = "é" * ((rm.CONFIGMAP_LIMIT_BYTES - len(key)) // 2 + 1)  # 2 bytes each in UTF-8
    with pytest.raises(ValueError, match="exceeds Kubernetes' 1 MiB limit"):
        rm.trainer_configmap("t", "n", {"training/u.py": text})


def test_namespace_under_pod_security_admission_in_full():
    assert rm.namespace_manifest("training", "1.36") == {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training", "labels": {
            "pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "v1.36",
            "pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "v1.36",
            "pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/audit-version": "v1.36"}}}


@pytest.mark.parametrize("automount", [True, False])
def test_service_account_in_full(automount):
    assert rm.service_account_manifest("ray", "training", automount) == {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ray", "namespace": "training"},
        "automountServiceAccountToken": automount}


def test_the_default_deployments_objects_pass_the_rules_they_are_held_to():
    """The defaults of cdk.json through the pure builders (pure_workload): 8 workers, the l4 profile."""
    workload = pure_workload()
    worker = worker_of(workload["RayCluster"])
    assert worker["replicas"] == 2 and worker["rayStartParams"] == {"num-gpus": "4"}
    assert "--workers=8" in workload["RayJob"]["spec"]["entrypoint"]


def test_imports_of_the_trainer_package_in_every_form():
    source = ("from training import a\nfrom training.b.c import d\nimport training.e\nimport os\nfrom . import rel\n"
              "def f():\n    from training import g\n")
    assert rm._imported_trainer_modules(source) == {"a", "b", "e", "g"}


def test_trainer_files_follow_imports_through_cycles_and_past_missing_modules(tmp_path):
    package = tmp_path / "training"
    package.mkdir()
    sources = {
        "__init__.py": "# the package\n",
        "train.py": "from training import data, step\nimport training.model\n",
        "step.py": "from training import train\nfrom training import missing\n",  # a cycle, and a module that is not there
        "data.py": "from training.schedule import lr_at\n",
        "model.py": "x = 1\n",
        "schedule.py": "def lr_at(): ...\n",
        "bench.py": "from training import train\n",  # imports the trainer, but nothing imports it
    }
    for name, text in sources.items():
        (package / name).write_text(text)
    assert rm.trainer_files(package, "train.py") == {
        f"training/{name}": sources[name] for name in ("__init__.py", "data.py", "model.py", "schedule.py", "step.py", "train.py")}
