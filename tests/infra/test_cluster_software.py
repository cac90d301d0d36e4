"""Cluster software: Helm charts, the trainer ConfigMap, RayCluster and RayJob against real schemas."""

from __future__ import annotations

import base64
import functools
import io
import json
import re
import shlex
import zipfile

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cdk_constructs import ray_manifests as rm
from cdk_constructs.device_plugins import EFA_VERSION, efa_values
from cdk_constructs.instance_types import INSTANCE_TYPES
from cdk_constructs.kuberay import KUBERAY_VERSION
from cdk_constructs.training_workload import TRAINER_PACKAGE
from tests.conftest import (ACCOUNT_PLACEHOLDER, DATA, STORAGE_PLACEHOLDER, URL_SUFFIX_PLACEHOLDER, pure_workload,
                            resources_of, template_for)

CRDS = DATA / "kuberay-v1.7.0"


# ------------------------------------------------------------------ helpers


def resolve(value):
    """Render CloudFormation intrinsics as placeholders, so a manifest string can be parsed."""
    if isinstance(value, dict):
        if "Fn::Join" in value:
            sep, parts = value["Fn::Join"]
            return sep.join(resolve(p) for p in parts)
        if "Ref" in value:
            return f"ref-{value['Ref'].lower()[:20]}"
        if "Fn::GetAtt" in value:
            return f"att-{value['Fn::GetAtt'][0].lower()[:20]}"
        return {k: resolve(v) for k, v in value.items()}
    return value


def manifests(template) -> list[dict]:
    found = []
    for resource in resources_of(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        found.extend(json.loads(resolve(resource["Properties"]["Manifest"])))
    return found


def manifest_of(template, kind: str, name: str | None = None) -> dict:
    [manifest] = [m for m in manifests(template) if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    return manifest


def helm_chart(template, chart: str) -> dict:
    [props] = [r["Properties"] for r in resources_of(template, "Custom::AWSCDK-EKS-HelmChart").values()
               if r["Properties"]["Chart"] == chart]
    return props | {"Values": json.loads(resolve(props.get("Values", "{}")))}


@functools.lru_cache(maxsize=None)
def crd_schema(kind: str) -> dict:
    crd = yaml.safe_load((CRDS / f"ray.io_{kind.lower()}s.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def unknown_fields(instance, schema, path="") -> list[str]:
    """Fields the schema does not declare: Kubernetes would silently prune them."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found = []
    if isinstance(instance, dict) and "properties" in schema:
        for key, value in instance.items():
            if key in schema["properties"]:
                found += unknown_fields(value, schema["properties"][key], f"{path}.{key}")
            elif not schema.get("additionalProperties"):
                found.append(f"{path}.{key}")
    elif isinstance(instance, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, value in instance.items():
            found += unknown_fields(value, schema["additionalProperties"], f"{path}.{key}")
    elif isinstance(instance, list) and "items" in schema:
        for i, item in enumerate(instance):
            found += unknown_fields(item, schema["items"], f"{path}[{i}]")
    return found


@functools.lru_cache(maxsize=None)
def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schema(kind))


def validate_against_crd(manifest: dict) -> None:
    schema = crd_schema(manifest["kind"])
    crd_validator(manifest["kind"]).validate(manifest)
    assert unknown_fields(manifest, schema) == []


def ray_cluster_of(job: dict) -> dict:
    """The RayCluster KubeRay makes from a RayJob (rayjob_controller.go constructRayClusterForRayJob)."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": job["metadata"]["name"] + "-x7k2p", "namespace": job["metadata"]["namespace"]},
            "spec": job["spec"]["rayClusterSpec"]}


@pytest.fixture(scope="module")
def cluster():
    return ray_cluster_of(pure_workload()["RayJob"])


@pytest.fixture(scope="module")
def worker(cluster):
    return cluster["spec"]["workerGroupSpecs"][0]


# ------------------------------------------------------------------ schemas


def test_ray_cluster_matches_kuberay_crd(cluster):
    validate_against_crd(cluster)


def test_ray_job_matches_kuberay_crd():
    validate_against_crd(pure_workload()["RayJob"])


@pytest.mark.parametrize("part", ["head", "worker", "submitter"])
def test_the_pods_kuberay_makes_from_the_job_are_valid_kubernetes_1_36_pods(part):
    """The CRD leaves pod templates to Kubernetes: checked here as the Pods KubeRay will create."""
    job = pure_workload()["RayJob"]["spec"]
    template = {"head": job["rayClusterSpec"]["headGroupSpec"]["template"],
                "worker": job["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
                "submitter": job["submitterPodTemplate"]}[part]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **template.get("metadata", {})},
           "spec": template["spec"]}
    kubernetes_validate.validate(pod, "1.36", strict=True)


def test_the_stacks_workload_is_what_the_pure_builders_make(template):
    """The tests on pure_workload() (which also run under `make mutation`) speak for the synthesized stack."""
    def without_prune_label(manifest: dict) -> dict:  # aws-cdk-lib's kubectl handler adds it
        labels = {k: v for k, v in manifest["metadata"].pop("labels", {}).items() if not k.startswith("aws.cdk.eks/prune-")}
        return manifest | {"metadata": manifest["metadata"] | ({"labels": labels} if labels else {})}

    built = pure_workload()
    assert without_prune_label(manifest_of(template, "ConfigMap", built["ConfigMap"]["metadata"]["name"])) == built["ConfigMap"]
    # The cached image's registry holds the account and the partition's domain, both deploy-time values.
    synthesized_job = json.loads(json.dumps(without_prune_label(manifest_of(template, "RayJob")))
                                 .replace("ref-aws::accountid", ACCOUNT_PLACEHOLDER)
                                 .replace("ref-aws::urlsuffix", URL_SUFFIX_PLACEHOLDER))
    # The bucket's name is a deploy-time token (shell-quoted in the entrypoint); the rest must be identical.
    synthesized_job["spec"]["entrypoint"] = re.sub(r"'?--storage-path=[^ ']+'?", f"--storage-path={STORAGE_PLACEHOLDER}",
                                                   synthesized_job["spec"]["entrypoint"])
    assert synthesized_job == built["RayJob"]


def test_unknown_field_is_caught():
    manifest = pure_workload()["RayJob"]
    manifest["spec"]["rayStartParam"] = {}
    assert unknown_fields(manifest, crd_schema("RayJob")) == [".spec.rayStartParam"]


def test_schema_check_catches_a_wrong_type():
    manifest = pure_workload()["RayJob"]
    manifest["spec"]["activeDeadlineSeconds"] = "4h"
    with pytest.raises(jsonschema.ValidationError, match="'4h' is not of type 'integer'"):
        validate_against_crd(manifest)


@pytest.mark.parametrize("kind", ["Namespace", "ConfigMap", "ServiceAccount", "NetworkPolicy"])
def test_core_kinds_valid_for_kubernetes_1_36(template, kind):
    found = [m for m in manifests(template) if m["kind"] == kind]
    assert found
    for manifest in found:
        kubernetes_validate.validate(manifest, "1.36", strict=True)


# ------------------------------------------------------------------ charts


@pytest.mark.parametrize("chart,repository,version", [
    ("nvidia-device-plugin", "https://nvidia.github.io/k8s-device-plugin", "0.20.0"),
    ("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", EFA_VERSION),
    ("kuberay-operator", "https://ray-project.github.io/kuberay-helm/", KUBERAY_VERSION),
])
def test_charts_pinned_from_their_owners(template, chart, repository, version):
    props = helm_chart(template, chart)
    assert props["Repository"] == repository and props["Version"] == version


def test_device_plugins_tolerate_the_gpu_taint(template):
    for chart in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        values = helm_chart(template, chart)["Values"]
        assert values["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]


def test_kuberay_operator_on_system_node(template):
    assert helm_chart(template, "kuberay-operator")["Values"]["nodeSelector"] == {"role": "system"}


def helm_merge(defaults, overrides):
    """Helm's coalescing of user values over a chart's defaults: maps merge key by key, lists and scalars replace."""
    if isinstance(defaults, dict) and isinstance(overrides, dict):
        return {k: helm_merge(defaults[k], overrides[k]) if k in defaults and k in overrides else overrides.get(k, defaults.get(k))
                for k in {**defaults, **overrides}}
    return overrides


@pytest.mark.parametrize("instance_type", sorted(n for n, spec in INSTANCE_TYPES.items() if spec.supports_efa))
def test_efa_plugin_runs_on_the_gpu_type_whatever_the_pinned_chart_lists(instance_type):
    """The pinned chart's own values (vendored from eks-charts) merged with ours, as Helm merges them:
    the DaemonSet's allowlist is exactly our GPU type, on GPU nodes, tolerating their taint."""
    chart_values = yaml.safe_load((DATA / "eks-charts" / f"aws-efa-k8s-device-plugin-{EFA_VERSION}.values.yaml").read_text())
    effective = helm_merge(chart_values, efa_values(instance_type, True))
    assert effective["supportedInstanceLabels"] == {"keys": ["node.kubernetes.io/instance-type"], "values": [instance_type]}
    assert effective["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert effective["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    assert effective["image"] == chart_values["image"]  # the rest stays the chart's


@pytest.mark.parametrize("instance_type", ["g6.12xlarge", "p5.48xlarge", "g6e.12xlarge"])
def test_efa_values_allow_the_configured_type(instance_type):
    assert efa_values(instance_type, True)["supportedInstanceLabels"]["values"] == [instance_type]


# ------------------------------------------------------------------ trainer ConfigMap


def test_configmap_holds_the_trainer_as_it_runs_in_the_pod(template):
    configmap = manifest_of(template, "ConfigMap")
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(configmap["binaryData"]["trainer.zip"]))) as archive:
        shipped = set(archive.namelist())
    assert {"training/train.py", "training/model.py", "training/transport.py", "training/__init__.py"} <= shipped
    assert "benchmarks/bench.py" not in shipped  # the GPU benchmark does not run in the pods


def test_trainer_files_follow_imports_from_the_entry(tmp_path):
    package = tmp_path / "training"
    package.mkdir()
    (package / "train.py").write_text("from training.model import build\nimport training.data\n")
    (package / "model.py").write_text("def build():\n    from training import loss\n")
    (package / "data.py").write_text("")
    (package / "loss.py").write_text("")
    (package / "bench.py").write_text("from training.model import build\n")
    (package / "__init__.py").write_text("")
    assert list(rm.trainer_files(package)) == ["training/__init__.py", "training/data.py", "training/loss.py",
                                               "training/model.py", "training/train.py"]  # sorted: a stable digest


def test_the_archive_is_mounted_alone_where_pythonpath_points(worker):
    container = worker["template"]["spec"]["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "trainer"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (mount["mountPath"], mount["subPath"], env["PYTHONPATH"]) == (
        "/opt/trainer/trainer.zip", "trainer.zip", "/opt/trainer/trainer.zip")


def test_configmap_name_changes_with_trainer():
    one = rm.content_hash({"training/a.py": "x = 1"})
    assert one != rm.content_hash({"training/a.py": "x = 2"})


def test_the_job_and_its_configmap_are_one_resource_and_no_raycluster_stands_alone(template):
    [resource] = [r for r in resources_of(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
                  if '\\"kind\\":\\"RayJob\\"' in json.dumps(r["Properties"]["Manifest"])]
    kinds = [m["kind"] for m in json.loads(resolve(resource["Properties"]["Manifest"]))]
    assert kinds == ["ConfigMap", "RayJob"]
    assert not [m for m in manifests(template) if m["kind"] == "RayCluster"]


# ------------------------------------------------------------------ RayCluster


def test_head_is_cluster_internal_on_system_node_with_no_gpus(cluster):
    head = cluster["spec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP" and head["rayStartParams"]["num-gpus"] == "0"
    assert head["template"]["spec"]["nodeSelector"] == {"role": "system"}


def test_head_on_the_cpu_node_tells_the_nvidia_hook_there_is_no_gpu(cluster):
    env = {e["name"]: e["value"] for e in cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_head_object_store_has_memory_backed_shm(cluster):
    spec = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "3Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]


def test_worker_requests_equal_limits_with_table_gpus_and_efa(worker):
    resources = worker["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {
        "cpu": "40", "memory": "160Gi", "nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"}
    assert worker["rayStartParams"]["num-gpus"] == resources["limits"]["nvidia.com/gpu"]
    assert worker["replicas"] == worker["minReplicas"] == worker["maxReplicas"] == 2


def test_p5_workers_get_8_gpus_and_32_efa():
    worker = manifest_of(template_for(gpu_instance_type="p5.48xlarge"), "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "32")


def test_worker_nccl_env(worker):
    env = {e["name"]: e.get("value") for e in worker["template"]["spec"]["containers"][0]["env"]}
    assert {k: env[k] for k in ("FI_PROVIDER", "NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG")} == {
        "FI_PROVIDER": "efa", "NCCL_NET_PLUGIN": "ofi", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}


def test_worker_has_memory_backed_shm_cache_and_prestop(worker):
    spec = worker["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert {"/dev/shm", rm.MODEL_CACHE_MOUNT, rm.TRAINER_ARCHIVE_PATH} <= mounts
    # The synthesized worker saves its step before it goes (training.preemption), within its grace period.
    assert spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == [
        "python", "-m", "training.preemption", "--wait", "65"]
    assert spec["terminationGracePeriodSeconds"] == 70
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"


# ------------------------------------------------------------------ RayJob and bucket


def test_ray_job_owns_its_cluster_and_trains_with_settings(template):
    job = manifest_of(template, "RayJob")["spec"]
    assert "clusterSelector" not in job and job["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert (job["shutdownAfterJobFinishes"], job["ttlSecondsAfterFinished"]) == (True, 300)
    assert job["activeDeadlineSeconds"] == 4 * 3600
    argv = shlex.split(job["entrypoint"])
    assert argv[:3] == ["python", "-m", "training.train"]
    options = dict(a.split("=", 1) for a in argv[3:] if "=" in a)
    assert (options["--model"], options["--steps"], options["--seq-len"], options["--workers"]) == (
        "Qwen/Qwen2.5-1.5B", "200", "2048", "8")
    assert options["--storage-path"].startswith("s3://") and "--require-efa" in argv


def test_ray_job_retries_on_a_new_cluster_and_the_submitter_on_its_own(template):
    """spec.backoffLimit: the whole job again on a fresh RayCluster (rayjob_controller.go
    checkBackoffLimitAndUpdateStatusIfNeeded); submitterConfig.backoffLimit: the submitter Job (createNewK8sJob)."""
    job = manifest_of(template, "RayJob")["spec"]
    assert (job["backoffLimit"], job["submitterConfig"]) == (1, {"backoffLimit": 2})
    changed = manifest_of(template_for(training={"backoff_limit": 0, "submitter_backoff_limit": 3,
                                                 "ttl_seconds_after_finished": 30}), "RayJob")["spec"]
    assert (changed["backoffLimit"], changed["submitterConfig"], changed["ttlSecondsAfterFinished"]) == (
        0, {"backoffLimit": 3}, 30)


def test_ray_job_runs_the_l4_profile_with_auto_resolved_at_synth(template):
    """The whole entrypoint, parsed by the trainer itself, carries the l4 profile's settings but the micro-batch,
    recomputation and sharding the settings leave to auto, which the synth resolved (the pods hold no planner):
    the pick keeps the profile's 1 x 4 sequences per GPU, and the planner's step time and link bandwidth come
    along for the trainer to measure against."""
    from training.command_line import parse_args
    from training.config import GPU_PROFILES

    config = parse_args(shlex.split(manifest_of(template, "RayJob")["spec"]["entrypoint"])[3:])
    l4 = GPU_PROFILES["l4"]
    for key, value in l4.items():
        if key not in ("micro_batch", "grad_accum", "activation_checkpointing"):
            assert getattr(config, key) == value, key
    assert "auto" not in (config.micro_batch, config.activation_checkpointing, config.sharding)
    assert config.micro_batch * config.grad_accum == l4["micro_batch"] * l4["grad_accum"]
    assert config.predicted_step_seconds > 0 and config.predicted_link_gbps > 0
    assert config.reshard_after_forward is True


def test_entrypoint_keeps_values_that_look_like_options():
    from training.command_line import parse_args

    entry = rm.train_entrypoint({"model": "tiny", "steps": 5, "require_efa": True, "storage_path": "-runs"})
    config = parse_args(shlex.split(entry)[3:])
    assert (config.model, config.steps, config.require_efa, config.storage_path) == ("tiny", 5, True, "-runs")


def test_bucket_encrypted_tls_only_private_versioned_retained(template):
    [bucket] = resources_of(template, "AWS::S3::Bucket").values()
    assert bucket["DeletionPolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert props["BucketEncryption"] == {"ServerSideEncryptionConfiguration": [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
    policy = json.dumps(resources_of(template, "AWS::S3::BucketPolicy"))
    assert '"aws:SecureTransport": "false"' in policy


def test_bucket_expires_old_checkpoint_versions_and_stale_uploads(template):
    [bucket] = resources_of(template, "AWS::S3::Bucket").values()
    [rule] = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled"
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}


def test_bucket_auto_delete_setting():
    template = template_for(training={"checkpoint_bucket_auto_delete": True})
    [bucket] = resources_of(template, "AWS::S3::Bucket").values()
    assert bucket["DeletionPolicy"] == "Delete"


def test_pods_get_bucket_access_through_pod_identity(template):
    [association] = [a for a in resources_of(template, "AWS::EKS::PodIdentityAssociation").values()
                     if a["Properties"]["Namespace"] == "training"]
    assert association["Properties"]["ServiceAccount"] == "ray"
    addons = {a["Properties"]["AddonName"] for a in resources_of(template, "AWS::EKS::Addon").values()}
    assert addons == {"eks-pod-identity-agent", "vpc-cni", "amazon-cloudwatch-observability"}


def test_order_nodes_then_operator_then_cluster_then_job(template):
    resources = template.to_json()["Resources"]

    def logical(kind_or_chart):
        for key, r in resources.items():
            props = r.get("Properties", {})
            if props.get("Chart") == kind_or_chart or f'"kind":"{kind_or_chart}"' in json.dumps(resolve(props.get("Manifest", ""))).replace('\\"', '"').replace(" ", ""):
                return key
        raise KeyError(kind_or_chart)

    def depends(a, b):
        return b in resources[a].get("DependsOn", [])

    assert depends(logical("RayJob"), logical("kuberay-operator"))
    assert depends(logical("RayJob"), logical("aws-efa-k8s-device-plugin"))
    assert depends(logical("RayJob"), logical("nvidia-device-plugin"))
    assert any("NodegroupGpuNodes" in d for d in resources[logical("aws-efa-k8s-device-plugin")]["DependsOn"])
    assert any("NodegroupSystemNodes" in d for d in resources[logical("kuberay-operator")]["DependsOn"])


def test_outputs_tell_how_to_follow_the_job(template):
    outputs = {k: json.dumps(v["Value"]) for k, v in template.to_json()["Outputs"].items()}
    job = manifest_of(template, "RayJob")["metadata"]["name"]
    assert "update-kubeconfig" in outputs["Kubeconfig"]
    assert f"get rayjob {job}" in outputs["JobStatus"] and f"logs -f job/{job}" in outputs["JobLogs"]
    # A RayJob's head Service is named after the job (utils.go GenerateHeadServiceName, RayJobCRD).
    assert f"port-forward service/{job}-head-svc 8265:8265" in outputs["Dashboard"]
    assert "Ref" in outputs["CheckpointBucket"]


def test_outputs_name_what_the_watcher_follows(template):
    outputs = template.to_json()["Outputs"]
    job = manifest_of(template, "RayJob")
    assert outputs["Namespace"]["Value"] == "training" and outputs["RayJobName"]["Value"] == job["metadata"]["name"]
    assert "RayClusterName" not in outputs  # KubeRay names the job's cluster at run time
    [eks_cluster] = resources_of(template, "AWS::EKS::Cluster")
    assert outputs["ClusterName"]["Value"] == {"Ref": eks_cluster}
    run = job["metadata"]["labels"]["eks-fsdp-efa/run"]
    assert json.dumps(outputs["RunPath"]["Value"]).endswith(f'/runs/{run}"]]}}')
