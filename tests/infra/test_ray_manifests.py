"""The workload's Kubernetes objects in full, from the pure builders (cdk_constructs/ray_manifests.py).

What ships is spelled out here field by field: a changed key, value or default shows up as a failed
test, not as an object that KubeRay or the API server treats differently after `cdk deploy`
(test_cluster_software checks the same objects against the CRDs and the API's schemas, and proves
the synthesized stack holds exactly these).
"""

from __future__ import annotations

import base64
import dataclasses
import io
import shlex
import zipfile

import pytest

from cdk_constructs import ray_manifests as rm
from cdk_constructs.errors import ConstructError
from tests.conftest import pure_workload

IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
COMMON_ENV = [{"name": "PYTHONPATH", "value": "/opt/trainer/trainer.zip"}, {"name": "HF_HOME", "value": "/mnt/model-cache"},
              {"name": "TOKENIZERS_PARALLELISM", "value": "false"}, {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
              {"name": "AWS_REGION", "value": "us-east-2"}, {"name": "AWS_DEFAULT_REGION", "value": "us-east-2"}]
SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
PRE_STOP = {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}}
# The worker's hook waits for the trainer's committed save up to 5 s before the grace period (120 s here) ends.
WORKER_PRE_STOP = {"preStop": {"exec": {"command": ["python", "-m", "training.preemption", "--wait", "115"]}}}
TRAINER_MOUNT = {"name": "trainer", "mountPath": "/opt/trainer/trainer.zip", "subPath": "trainer.zip", "readOnly": True}
TRAINER_VOLUME = {"name": "trainer", "configMap": {"name": "job-1-trainer", "items": [{"key": "trainer.zip", "path": "trainer.zip"}]}}


def spec(**overrides) -> rm.RayClusterSpec:
    base = rm.RayClusterSpec(image=IMAGE, service_account="ray",
                             trainer_files={"training/train.py": "import training.step\n", "training/step.py": "x = 1\n"},
                             worker_replicas=2, gpus_per_worker=4, efa_per_worker=1, cpu_per_worker=40,
                             memory_gib_per_worker=160, region="us-east-2")
    return dataclasses.replace(base, **overrides)


def job(**overrides) -> rm.RayJobSpec:
    base = rm.RayJobSpec(namespace="training", cluster=spec(), trainer_options={"model": "tiny", "steps": 5},
                         storage_path="s3://b/runs")
    return dataclasses.replace(base, **overrides)


def cluster_of(pods: rm.RayClusterSpec, configmap: str = "cm") -> dict:
    return {"spec": rm.ray_cluster_spec(pods, configmap)}


def head_of(cluster: dict) -> dict:
    return cluster["spec"]["headGroupSpec"]


def worker_of(cluster: dict) -> dict:
    return cluster["spec"]["workerGroupSpecs"][0]


def test_cluster_spec_in_full():
    cluster = rm.ray_cluster_spec(spec(), "cm")
    s = spec()
    assert set(cluster) == {"rayVersion", "authOptions", "headGroupSpec", "workerGroupSpecs"}
    assert cluster["rayVersion"] == "2.58.0" and cluster["authOptions"] == {"mode": "token"}
    head = cluster["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP" and head["rayStartParams"] == {"num-gpus": "0", "dashboard-host": "0.0.0.0"}
    assert head["template"]["metadata"] == {"annotations": {"eks-fsdp-efa/trainer-hash": s.trainer_hash}}
    worker = cluster["workerGroupSpecs"][0]
    assert {k: v for k, v in worker.items() if k != "template"} == {
        "groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2, "rayStartParams": {"num-gpus": "4"}}
    assert worker["template"]["metadata"] == {"annotations": {"eks-fsdp-efa/trainer-hash": s.trainer_hash}}


def test_head_pod_in_full():
    pod = head_of(cluster_of(spec(), "job-1-trainer"))["template"]["spec"]
    assert pod == {
        "serviceAccountName": "ray", "automountServiceAccountToken": False, "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {"role": "system"},
        "containers": [{
            "name": "ray-head", "image": IMAGE,
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}},
            # The head runs on a CPU node: the image's NVIDIA hook must be told there is no GPU.
            "env": COMMON_ENV + [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
            "volumeMounts": [TRAINER_MOUNT, {"name": "dshm", "mountPath": "/dev/shm"}],
            "securityContext": SECURITY, "lifecycle": PRE_STOP}],
        "volumes": [
            TRAINER_VOLUME,
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "3Gi"}}],
    }


def test_worker_pod_in_full():
    pod = worker_of(cluster_of(spec(), "job-1-trainer"))["template"]["spec"]
    resources = {"cpu": "40", "memory": "160Gi", "nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"}
    assert pod == {
        "serviceAccountName": "ray", "automountServiceAccountToken": False, "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": 120,
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        "containers": [{
            "name": "ray-worker", "image": IMAGE, "resources": {"requests": resources, "limits": resources},
            "env": COMMON_ENV + [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "NCCL_NET_PLUGIN", "value": "ofi"},
                                 {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}, {"name": "NCCL_DEBUG", "value": "INFO"},
                                 {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "volumeMounts": [TRAINER_MOUNT, {"name": "dshm", "mountPath": "/dev/shm"},
                             {"name": "model-cache", "mountPath": "/mnt/model-cache"}],
            "securityContext": SECURITY, "lifecycle": WORKER_PRE_STOP}],
        "volumes": [
            TRAINER_VOLUME,
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
            {"name": "model-cache", "emptyDir": {"sizeLimit": "100Gi"}}],
    }


def test_an_untainted_gpu_node_needs_no_toleration():
    assert worker_of(cluster_of(spec(gpu_taint=False)))["template"]["spec"]["tolerations"] == []


def test_the_hugging_face_token_comes_by_reference_and_extra_env_follows():
    cluster = cluster_of(spec(hf_token_secret="hf", extra_env={"NCCL_ALGO": "Ring"}))
    for group in (head_of(cluster), worker_of(cluster)):
        env = group["template"]["spec"]["containers"][0]["env"]
        assert {"name": "NCCL_ALGO", "value": "Ring"} in env
        assert env[-1] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}


def test_without_a_region_no_aws_region_is_set():
    env = worker_of(cluster_of(spec(region=None)))["template"]["spec"]["containers"][0]["env"]
    assert not [e for e in env if e["name"] in ("AWS_REGION", "AWS_DEFAULT_REGION")]


@pytest.mark.parametrize("change", [
    {"image": IMAGE + "-2"}, {"worker_replicas": 3}, {"gpus_per_worker": 8}, {"efa_per_worker": 32},
    {"cpu_per_worker": 30}, {"memory_gib_per_worker": 100}, {"gpu_taint": False}, {"shm_gib": 16},
    {"model_cache_gib": 50}, {"head_cpu": 4}, {"head_memory_gib": 16}, {"head_shm_gib": 2}, {"ray_version": "2.59.0"},
    {"region": "us-west-2"}, {"hf_token_secret": "hf"}, {"extra_env": {"A": "1"}}, {"service_account": "other"},
    {"trainer_files": {"training/train.py": "pass\n"}},
])
def test_any_change_to_the_pods_names_a_new_job_and_the_same_spec_the_same_one(change):
    """KubeRay disregards a changed rayClusterSpec under an existing RayJob name (getOrCreateRayClusterInstance)."""
    name = job().name
    assert job().name == name
    changed = job(cluster=spec(**change))
    assert changed.name != name and changed.configmap_name != job().configmap_name


@pytest.mark.parametrize("change", [
    {"trainer_options": {"model": "tiny", "steps": 6}}, {"rerun": 1}, {"active_deadline_seconds": 3600}, {"pre_running_deadline_seconds": 900},
    {"backoff_limit": 0}, {"submitter_backoff_limit": 0}, {"ttl_seconds_after_finished": 0}, {"cache_dir": "/c"},
])
def test_any_change_to_the_job_names_a_new_job(change):
    assert job(**change).name != job().name


def test_digest_is_a_stable_sha256_prefix_of_sorted_json():
    assert rm.digest({"b": 1, "a": [1, 2]}) == rm.digest({"a": [1, 2], "b": 1}) == "94a786c366"
    assert len(rm.digest("x")) == rm.DIGEST_CHARS == 10


def test_job_in_full():
    j = job(trainer_options={"model": "tiny", "steps": 5, "compile": False, "require_efa": True, "model_revision": None},
            active_deadline_seconds=600, pre_running_deadline_seconds=300, backoff_limit=2, submitter_backoff_limit=1, ttl_seconds_after_finished=120)
    run = j.run_name
    assert run == "ft-" + rm.digest([j.trainer_options, spec().trainer_hash])
    assert j.name.startswith(run + "-") and len(j.name) == len(run) + 1 + 10
    assert j.configmap_name == j.name + "-trainer"
    manifest = rm.ray_job_manifest(j)
    assert manifest["metadata"] == {"name": j.name, "namespace": "training", "labels": {"eks-fsdp-efa/run": run},
                                    "annotations": {"eks-fsdp-efa/trainer-hash": spec().trainer_hash}}
    assert {k: v for k, v in manifest["spec"].items() if k not in ("rayClusterSpec", "submitterPodTemplate")} == {
        "entrypoint": f"python -m training.train --model=tiny --steps=5 --no-compile --require-efa "
                      f"--storage-path=s3://b/runs --run-name={run} --cache-dir=/mnt/model-cache",
        "submissionMode": "K8sJobMode", "shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 120,
        "activeDeadlineSeconds": 600, "preRunningDeadlineSeconds": 300, "backoffLimit": 2,
        "submitterConfig": {"backoffLimit": 1}}
    assert "clusterSelector" not in manifest["spec"]
    assert manifest["spec"]["rayClusterSpec"] == rm.ray_cluster_spec(spec(), j.name + "-trainer")


def test_job_defaults():
    j = rm.RayJobSpec(namespace="n", cluster=spec(), trainer_options={}, storage_path="/r")
    manifest = rm.ray_job_manifest(j)["spec"]
    assert (manifest["activeDeadlineSeconds"], manifest["preRunningDeadlineSeconds"], manifest["backoffLimit"],
            manifest["submitterConfig"], manifest["ttlSecondsAfterFinished"]) == (4 * 3600, 1200, 1, {"backoffLimit": 2}, 300)
    assert j.cache_dir == "/mnt/model-cache" and j.rerun == 0


@pytest.mark.parametrize("pre_running,active", [(3600, 3600), (7200, 3600), (0, 3600)])
def test_a_pre_running_deadline_the_active_deadline_would_preempt_is_refused(pre_running, active):
    """KubeRay v1.7.0 rayjob_controller.go: an initializing job is checked against activeDeadlineSeconds before
    preRunningDeadlineSeconds, and DeadlineExceeded is never retried (checkBackoffLimitAndUpdateStatusIfNeeded)."""
    with pytest.raises(ConstructError, match=rf"^RayJob: preRunningDeadlineSeconds {pre_running} must be positive and "
                                             rf"below activeDeadlineSeconds {active} "):
        job(pre_running_deadline_seconds=pre_running, active_deadline_seconds=active)


def test_submitter_pod_is_kuberays_default_hardened():
    """common/job.go GetDefaultSubmitterContainer at v1.7.0: the head's image, requests 500m CPU and 200Mi,
    limits 1 CPU and 1Gi, container ray-job-submitter, restartPolicy Never (GetSubmitterTemplate)."""
    template = rm.ray_job_manifest(job())["spec"]["submitterPodTemplate"]
    assert template == {"spec": {
        "restartPolicy": "Never", "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {"role": "system"},
        "containers": [{
            "name": "ray-job-submitter", "image": IMAGE,
            "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
            "securityContext": SECURITY}]}}


def test_submitter_leaves_the_command_to_kuberay():
    """rayjob_controller.go configureSubmitterContainer writes `ray job submit ... -- <entrypoint>` only into a
    container without a command; one with a command would run that instead and never submit the job."""
    [container] = rm.ray_job_manifest(job())["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert "command" not in container and "args" not in container


def test_rerun_is_a_new_run_folder_and_a_new_job():
    first, again = job(), job(rerun=2)
    assert again.run_name == first.run_name + "-r2"
    assert again.name != first.name and f"--run-name={again.run_name}" in again.entrypoint()


def test_another_node_count_is_the_same_run_in_a_new_job():
    """The trainer resumes a run on another number of GPUs: a deploy with fewer nodes continues the run."""
    # What the synth resolves for each node count differs too (planning.auto.resolve_options).
    two_nodes = job(trainer_options={"model": "tiny", "steps": 5, "workers": 8, "micro_batch": 2, "sharding": "hybrid",
                                     "activation_checkpointing": "full", "predicted_step_seconds": 1.5,
                                     "predicted_link_gbps": 5.0})
    one_node = job(trainer_options={"model": "tiny", "steps": 5, "workers": 4, "micro_batch": 4, "sharding": "full",
                                    "activation_checkpointing": "none", "predicted_step_seconds": 2.9,
                                    "predicted_link_gbps": 40.0})
    assert two_nodes.run_name == one_node.run_name
    assert two_nodes.name != one_node.name and "--workers=4" in one_node.entrypoint()


def test_a_run_that_gets_a_tracker_keeps_its_name_and_checkpoints():
    """Where a run is reported is not what it trains: turning tracking on continues the run in a new job."""
    untracked = job()
    tracked = job(trainer_options={"model": "tiny", "steps": 5, "tracking": "wandb", "wandb_project": "qwen",
                                   "wandb_entity": "team"})
    assert tracked.run_name == untracked.run_name and tracked.name != untracked.name
    assert "--tracking=wandb" in tracked.entrypoint()


def test_only_the_workers_get_the_wandb_keys_secret_name_never_a_key():
    """Rank 0 runs on a worker and reads the key itself (training/tracking.py reads this variable)."""
    from training.tracking import WANDB_SECRET_ENV

    cluster = cluster_of(spec(wandb_api_key_secret="team/wandb-key"))
    env = {e["name"]: e for e in worker_of(cluster)["template"]["spec"]["containers"][0]["env"]}
    assert env[WANDB_SECRET_ENV] == {"name": WANDB_SECRET_ENV, "value": "team/wandb-key"} and "WANDB_API_KEY" not in env
    head = head_of(cluster)["template"]["spec"]["containers"][0]["env"]
    assert WANDB_SECRET_ENV not in {e["name"] for e in head}


def test_the_storage_path_is_not_part_of_any_name():
    a, b = (job(storage_path=path) for path in ("s3://one/runs", "s3://two/runs"))
    assert (a.run_name, a.name, a.configmap_name) == (b.run_name, b.name, b.configmap_name)


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
    configmap = rm.trainer_configmap("trainer-x", "training", files)
    archive = base64.b64decode(configmap.pop("binaryData").pop("trainer.zip"))
    assert configmap == {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "trainer-x", "namespace": "training",
                     "annotations": {"eks-fsdp-efa/trainer-hash": rm.content_hash(files)}},
    }
    with zipfile.ZipFile(io.BytesIO(archive)) as opened:
        assert {name: opened.read(name).decode() for name in opened.namelist()} == files


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
    worker = workload["RayJob"]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
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


def test_pods_pull_from_the_cache_and_the_jobs_name_does_not_hold_its_deploy_time_account():
    cached = {account: job(cluster=spec(pulled_image=f"{account}.dkr.ecr.us-east-2.amazonaws.com/ecr-public/x:1"))
              for account in ("${Token[AWS.AccountId.8]}", "111122223333")}
    first, second = cached.values()
    assert first.name == second.name != job().name  # the account stays out of the name; the cache does not
    manifest = rm.ray_job_manifest(second)
    pods = [manifest["spec"]["rayClusterSpec"]["headGroupSpec"], manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0],
            manifest["spec"]["submitterPodTemplate"]]
    images = {(p["template"]["spec"] if "template" in p else p["spec"])["containers"][0]["image"] for p in pods}
    assert images == {"111122223333.dkr.ecr.us-east-2.amazonaws.com/ecr-public/x:1"}


def test_the_default_grace_period_covers_a_drained_pods_step_and_save():
    """The default run (planning/checkpoint_time.py): 34.7 s to save a step, plus 30 s, rounded up to 70 s; within a
    spot interruption's 120 s. The head trains nothing and keeps `ray stop` and Kubernetes' default."""
    cluster = pure_workload()["RayJob"]["spec"]["rayClusterSpec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["terminationGracePeriodSeconds"] == 70
    assert worker["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][-2:] == ["--wait", "65"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert "terminationGracePeriodSeconds" not in head and head["containers"][0]["lifecycle"] == PRE_STOP


def test_the_worker_prestop_hook_runs_a_module_the_trainer_archive_ships():
    """The hook runs `python -m training.preemption` from the pods' PYTHONPATH, the trainer archive: the module must
    be among the files the ConfigMap carries (the trainer's imports, cdk_constructs.ray_manifests.trainer_files)."""
    from cdk_constructs.training_workload import TRAINER_PACKAGE

    command = rm.pre_stop_command(spec(), worker=True)
    module = command[command.index("-m") + 1]
    assert f"{module.replace('.', '/')}.py" in rm.trainer_files(TRAINER_PACKAGE)
