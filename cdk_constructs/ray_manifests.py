"""Kubernetes manifests of the training workload, built by pure functions (tested against KubeRay's CRDs)."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from cdk_constructs.device_plugins import GPU_NODE_SELECTOR, gpu_tolerations
from cdk_constructs.node_groups import SYSTEM_NODE_LABELS

TRAINER_MOUNT = "/opt/trainer"
MODEL_CACHE_MOUNT = "/mnt/model-cache"
CONFIGMAP_LIMIT_BYTES = 1024 * 1024


def trainer_files(package_dir: Path) -> dict[str, str]:
    """Every .py file of the trainer package, by its path relative to the package's parent."""
    return {
        str(path.relative_to(package_dir.parent)): path.read_text()
        for path in sorted(package_dir.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def content_hash(files: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return digest.hexdigest()[:10]


def configmap_key(path: str) -> str:
    # ConfigMap keys may not hold '/'; the volume's items[].path restores the folders.
    return path.replace("/", "__")


def trainer_configmap(name: str, namespace: str, files: dict[str, str]) -> dict:
    manifest = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"eks-fsdp-efa/trainer-hash": content_hash(files)}},
        "data": {configmap_key(path): text for path, text in files.items()},
    }
    size = sum(len(k) + len(v.encode()) for k, v in manifest["data"].items())
    if size > CONFIGMAP_LIMIT_BYTES:
        raise ValueError(f"trainer ConfigMap: {size} bytes exceeds Kubernetes' 1 MiB limit")
    return manifest


def namespace_manifest(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


@dataclass(frozen=True)
class RayClusterSpec:
    name: str
    namespace: str
    image: str
    service_account: str
    configmap_name: str
    trainer_paths: tuple[str, ...]
    trainer_hash: str
    worker_replicas: int
    gpus_per_worker: int
    efa_per_worker: int
    cpu_per_worker: int
    memory_gib_per_worker: int
    gpu_taint: bool = True
    shm_gib: int = 32
    model_cache_gib: int = 100
    head_cpu: int = 2
    head_memory_gib: int = 8
    extra_env: dict[str, str] = field(default_factory=dict)


def _env(spec: RayClusterSpec, worker: bool) -> list[dict]:
    env = {
        "PYTHONPATH": TRAINER_MOUNT,
        "HF_HOME": MODEL_CACHE_MOUNT,
        "TOKENIZERS_PARALLELISM": "false",
    }
    if worker:
        # NCCL through aws-ofi-nccl on the EFA provider; eth0 for bootstrap (not a pod-identity link).
        env |= {"FI_PROVIDER": "efa", "NCCL_NET_PLUGIN": "ofi", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}
    env |= spec.extra_env
    return [{"name": k, "value": v} for k, v in env.items()]


def _volumes(spec: RayClusterSpec, worker: bool) -> tuple[list[dict], list[dict]]:
    volumes = [{
        "name": "trainer",
        "configMap": {"name": spec.configmap_name,
                      "items": [{"key": configmap_key(p), "path": p} for p in spec.trainer_paths]},
    }]
    mounts = [{"name": "trainer", "mountPath": TRAINER_MOUNT, "readOnly": True}]
    if worker:
        volumes += [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_gib}Gi"}},
            # One download of the weights per pod, shared by its GPU workers.
            {"name": "model-cache", "emptyDir": {"sizeLimit": f"{spec.model_cache_gib}Gi"}},
        ]
        mounts += [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT}]
    return volumes, mounts


def _container(spec: RayClusterSpec, name: str, resources: dict, worker: bool) -> dict:
    _, mounts = _volumes(spec, worker)
    return {
        "name": name, "image": spec.image,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "env": _env(spec, worker),
        "volumeMounts": mounts,
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }


def worker_resources(spec: RayClusterSpec) -> dict[str, str]:
    """requests == limits (QoS Guaranteed); GPU and EFA counts from the instance table."""
    return {
        "cpu": str(spec.cpu_per_worker), "memory": f"{spec.memory_gib_per_worker}Gi",
        "nvidia.com/gpu": str(spec.gpus_per_worker), "vpc.amazonaws.com/efa": str(spec.efa_per_worker),
    }


def ray_cluster_manifest(spec: RayClusterSpec) -> dict:
    head_volumes, _ = _volumes(spec, worker=False)
    worker_volumes, _ = _volumes(spec, worker=True)
    annotations = {"eks-fsdp-efa/trainer-hash": spec.trainer_hash}
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": spec.name, "namespace": spec.namespace},
        "spec": {
            "headGroupSpec": {
                "serviceType": "ClusterIP",  # never exposed outside the cluster; use port-forward
                "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {
                        "serviceAccountName": spec.service_account,
                        "nodeSelector": dict(SYSTEM_NODE_LABELS),
                        "containers": [_container(spec, "ray-head", {"cpu": str(spec.head_cpu), "memory": f"{spec.head_memory_gib}Gi"}, worker=False)],
                        "volumes": head_volumes,
                    },
                },
            },
            "workerGroupSpecs": [{
                "groupName": "gpu",
                "replicas": spec.worker_replicas, "minReplicas": spec.worker_replicas, "maxReplicas": spec.worker_replicas,
                # Ray's GPU count comes from the same value as the pod's GPU request.
                "rayStartParams": {"num-gpus": str(spec.gpus_per_worker)},
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {
                        "serviceAccountName": spec.service_account,
                        "nodeSelector": dict(GPU_NODE_SELECTOR),
                        "tolerations": gpu_tolerations(spec.gpu_taint),
                        "containers": [_container(spec, "ray-worker", worker_resources(spec), worker=True)],
                        "volumes": worker_volumes,
                    },
                },
            }],
        },
    }


def train_entrypoint(args: dict[str, object]) -> str:
    """`python -m training.train` with one --flag per setting (booleans as --flag / --no-flag)."""
    parts = ["python", "-m", "training.train"]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + key.replace("_", "-"))
        elif value is not None:
            parts += [flag, str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def ray_job_manifest(name: str, namespace: str, cluster_name: str, entrypoint: str,
                     active_deadline_seconds: int, backoff_limit: int) -> dict:
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "entrypoint": entrypoint,
            "clusterSelector": {"ray.io/cluster": cluster_name},
            "submissionMode": "K8sJobMode",
            "activeDeadlineSeconds": active_deadline_seconds,
            "backoffLimit": backoff_limit,
        },
    }
