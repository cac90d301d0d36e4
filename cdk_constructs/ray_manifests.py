"""Kubernetes manifests of the training workload, built by pure functions.

One RayJob per run, owning its RayCluster (rayClusterSpec): KubeRay creates the cluster when the
job starts and deletes it once the job is over (shutdownAfterJobFinishes, after
ttlSecondsAfterFinished), so the GPU nodes are paid for while a job needs them. KubeRay ignores a
changed rayClusterSpec on a RayJob that exists ("Disregard changes in RayClusterSpec of RayJob",
rayjob_controller.go getOrCreateRayClusterInstance), so a change must arrive as a new RayJob: the
job is named after a digest of everything in it (pods, trainer files, options, rerun number), and
every other object of the job (the trainer ConfigMap) after the job. The same settings give the
same names (a second deploy changes nothing and trains nothing); any change gives new ones, and
no two jobs share an object.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from cdk_constructs.annotations import AUTO_ANNOTATION, IMAGE_SOURCE_ANNOTATION
from cdk_constructs.device_plugins import GPU_NODE_SELECTOR, gpu_tolerations
from cdk_constructs.errors import ConstructError
from cdk_constructs.node_groups import SYSTEM_NODE_LABELS
from cdk_constructs.trainer_archive import ARCHIVE_KEY, ANNOTATIONS_BUDGET_BYTES, check_configmap_fits, trainer_archive
from training.preemption import HOOK_MARGIN_S

TRAINER_PACKAGE = "training"
TRAINER_ENTRY = "train.py"
TRAINER_MOUNT = "/opt/trainer"
# The pods import the trainer from the archive (zipimport): it is their PYTHONPATH.
TRAINER_ARCHIVE_PATH = f"{TRAINER_MOUNT}/{ARCHIVE_KEY}"
MODEL_CACHE_MOUNT = "/mnt/model-cache"
DIGEST_CHARS = 10


def digest(value: object) -> str:
    """A short, stable content digest of JSON-serialisable data."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def _imported_trainer_modules(source: str) -> set[str]:
    """Names of the trainer package's modules that a module imports (any scope)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            head, _, rest = node.module.partition(".")
            if head == TRAINER_PACKAGE:
                found |= {rest.split(".")[0]} if rest else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith(TRAINER_PACKAGE + ".")}
    return found


def trainer_files(package_dir: Path, entry: str = TRAINER_ENTRY) -> dict[str, str]:
    """The trainer as it runs in the pods: the entry module and every package module it imports,
    by path relative to the package's parent. Tools beside it (the GPU benchmark) stay out, so
    editing them rolls no RayCluster."""
    wanted, files = [Path(entry).stem], {}
    while wanted:
        module = wanted.pop()
        path = package_dir / f"{module}.py"
        key = str(path.relative_to(package_dir.parent))
        if key in files or not path.is_file():
            continue
        files[key] = path.read_text()
        wanted += sorted(_imported_trainer_modules(files[key]))
    init = package_dir / "__init__.py"
    if init.is_file():
        files[str(init.relative_to(package_dir.parent))] = init.read_text()
    return dict(sorted(files.items()))


def content_hash(files: dict[str, str]) -> str:
    return digest(files)


def trainer_configmap(name: str, namespace: str, files: dict[str, str], budget: int = ANNOTATIONS_BUDGET_BYTES) -> dict:
    """The trainer files as one zip archive (binaryData), refused at synth if the API server would refuse
    it under `kubectl apply` or if it comes near that limit (trainer_archive.check_configmap_fits)."""
    archive = trainer_archive(files)
    manifest = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"eks-fsdp-efa/trainer-hash": content_hash(files)}},
        "binaryData": {ARCHIVE_KEY: base64.b64encode(archive).decode()},
    }
    check_configmap_fits(manifest, archive, budget)
    return manifest


def namespace_manifest(name: str, kubernetes_version: str) -> dict:
    """The training namespace under Pod Security Admission: baseline enforced (no privileged pods,
    host namespaces or added capabilities), restricted reported."""
    version = f"v{kubernetes_version}"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": version,
        "pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": version,
        "pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/audit-version": version,
    }}}


def service_account_manifest(name: str, namespace: str, automount_token: bool) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace},
            "automountServiceAccountToken": automount_token}


@dataclass(frozen=True)
class RayClusterSpec:
    """The pods of a job's Ray cluster."""

    image: str
    service_account: str
    trainer_files: dict[str, str]
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
    head_shm_gib: int = 3
    """The head's object store lives in /dev/shm (about 30% of its memory by Ray's default)."""
    ray_version: str = "2.58.0"
    """The image's Ray: KubeRay's token authentication needs it (2.52.0 or later)."""
    region: str | None = None
    """AWS_REGION of the pods, so that no SDK asks the (unreachable) instance metadata for it."""
    hf_token_secret: str | None = None
    """A Secret (key `token`) whose value becomes HF_TOKEN, by reference: never a plain value."""
    wandb_api_key_secret: str | None = None
    """The Secrets Manager secret (name or ARN) of the W&B API key: its name reaches the workers, where rank 0
    reads the key through the pods' role (training/tracking.py); the key itself never appears here."""
    extra_env: dict[str, str] = field(default_factory=dict)
    pulled_image: str | None = None
    """Where the pods pull `image` from when not from its own registry (a pull-through cache; its URI holds
    the account, a deploy-time value, so the job's name is digested with a stand-in)."""
    termination_grace_period_seconds: int = 120
    """The GPU worker pods' grace period: their preStop hook asks the trainer to save the current step and waits
    for the commit (training.preemption) within it (stacks.settings.termination_grace)."""

    @property
    def image_uri(self) -> str:
        return self.pulled_image or self.image

    @property
    def trainer_hash(self) -> str:
        return content_hash(self.trainer_files)


def _env(spec: RayClusterSpec, worker: bool) -> list[dict]:
    env = {
        "PYTHONPATH": TRAINER_ARCHIVE_PATH,
        "HF_HOME": MODEL_CACHE_MOUNT,
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    if spec.region:
        env |= {"AWS_REGION": spec.region, "AWS_DEFAULT_REGION": spec.region}
    if worker:
        # NCCL through aws-ofi-nccl on the EFA provider; eth0 for bootstrap (not a pod-identity link).
        env |= {"FI_PROVIDER": "efa", "NCCL_NET_PLUGIN": "ofi", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}
    else:
        # The head runs on a CPU node; the image's NVIDIA runtime hook fails there unless told there is no GPU.
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
    env |= spec.extra_env
    variables = [{"name": k, "value": v} for k, v in env.items()]
    if worker:  # the health gate names a slow node by the Kubernetes node's name (a pod's hostname is the pod's)
        variables.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    if worker and spec.wandb_api_key_secret:
        variables.append({"name": WANDB_SECRET_ENV, "value": spec.wandb_api_key_secret})
    if spec.hf_token_secret:
        variables.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": spec.hf_token_secret, "key": "token"}}})
    return variables


def _volumes(spec: RayClusterSpec, worker: bool, configmap_name: str) -> list[dict]:
    volumes = [
        {"name": "trainer", "configMap": {"name": configmap_name, "items": [{"key": ARCHIVE_KEY, "path": ARCHIVE_KEY}]}},
        # Ray's object store is shared memory; the container runtime's default /dev/shm is 64 MiB.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_gib if worker else spec.head_shm_gib}Gi"}},
    ]
    if worker:
        # One download of the weights per pod, shared by its GPU workers.
        volumes.append({"name": "model-cache", "emptyDir": {"sizeLimit": f"{spec.model_cache_gib}Gi"}})
    return volumes


def _mounts(worker: bool) -> list[dict]:
    # By subPath: the archive alone at its path, without the ConfigMap volume's symlinked folders.
    mounts = [{"name": "trainer", "mountPath": TRAINER_ARCHIVE_PATH, "subPath": ARCHIVE_KEY, "readOnly": True},
              {"name": "dshm", "mountPath": "/dev/shm"}]
    return mounts + ([{"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT}] if worker else [])


# Nothing in Ray, NCCL or EFA needs a capability or privilege escalation (EFA's memory registration
# needs an unlimited memlock rlimit, which containers inherit from the node's containerd: node_groups.memlock_user_data).
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}


def pre_stop_command(spec: RayClusterSpec, worker: bool) -> list[str]:
    """A GPU worker, asked to stop (a drain, a spot interruption, a scale-down, `kubectl delete pod`), first has
    the trainer save the current step and waits for the commit (training.preemption; the trainer archive is the
    container's PYTHONPATH); Kubernetes sends SIGTERM to `ray start --block` only after the hook, and Ray's own
    SIGTERM handler then drains the node and ends the workers. The head trains nothing: `ray stop`."""
    if not worker:
        return ["/bin/sh", "-c", "ray stop"]
    return ["python", "-m", "training.preemption", "--wait", str(spec.termination_grace_period_seconds - HOOK_MARGIN_S)]


def _container(spec: RayClusterSpec, name: str, resources: dict, worker: bool) -> dict:
    return {
        "name": name, "image": spec.image_uri,
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "env": _env(spec, worker),
        "volumeMounts": _mounts(worker),
        "securityContext": dict(CONTAINER_SECURITY),
        "lifecycle": {"preStop": {"exec": {"command": pre_stop_command(spec, worker)}}},
    }


def worker_resources(spec: RayClusterSpec) -> dict[str, str]:
    """requests == limits (QoS Guaranteed); GPU and EFA counts from the instance table."""
    return {
        "cpu": str(spec.cpu_per_worker), "memory": f"{spec.memory_gib_per_worker}Gi",
        "nvidia.com/gpu": str(spec.gpus_per_worker), "vpc.amazonaws.com/efa": str(spec.efa_per_worker),
    }


# The job's pods read the Kubernetes API for nothing: KubeRay's token mode hands the Ray token over as a
# Secret reference in an env var, which the kubelet resolves (common/pod.go SetContainerTokenAuthEnvVars),
# and EKS Pod Identity mounts its own projected token whatever this says.
NO_API_TOKEN = {"automountServiceAccountToken": False}


def ray_cluster_spec(spec: RayClusterSpec, configmap_name: str) -> dict:
    """The RayJob's rayClusterSpec: a CPU head on the system node, one GPU worker per GPU node."""
    head_volumes = _volumes(spec, worker=False, configmap_name=configmap_name)
    worker_volumes = _volumes(spec, worker=True, configmap_name=configmap_name)
    annotations = {"eks-fsdp-efa/trainer-hash": spec.trainer_hash}
    return {
        # KubeRay makes a random token (a Secret named after the cluster, key auth_token) and hands it to
        # the head, the workers and the job submitter: Ray's job API, dashboard, client and GCS refuse
        # anyone without it (validation.go: token mode needs rayVersion 2.52.0 or later).
        "rayVersion": spec.ray_version,
        "authOptions": {"mode": "token"},
        "headGroupSpec": {
            "serviceType": "ClusterIP",  # never exposed outside the cluster; use port-forward
            "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "serviceAccountName": spec.service_account, **NO_API_TOKEN,
                    "securityContext": dict(POD_SECURITY),
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
                    "serviceAccountName": spec.service_account, **NO_API_TOKEN,
                    "securityContext": dict(POD_SECURITY),
                    "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
                    "nodeSelector": dict(GPU_NODE_SELECTOR),
                    "tolerations": gpu_tolerations(spec.gpu_taint),
                    "containers": [_container(spec, "ray-worker", worker_resources(spec), worker=True)],
                    "volumes": worker_volumes,
                },
            },
        }],
    }


# KubeRay's default submitter (common/job.go GetSubmitterTemplate, GetDefaultSubmitterContainer): the
# head's image, 500m CPU / 200Mi requested, 1 CPU / 1Gi limit, restartPolicy Never, and no command, so
# that KubeRay writes its own `ray job submit` command into it (rayjob_controller.go configureSubmitterContainer).
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def submitter_pod_template(spec: RayClusterSpec) -> dict:
    """KubeRay's default submitter pod, hardened: no privilege, no API token, on the system node."""
    return {"spec": {
        "restartPolicy": "Never", **NO_API_TOKEN,
        "securityContext": dict(POD_SECURITY),
        "nodeSelector": dict(SYSTEM_NODE_LABELS),
        "containers": [{
            "name": SUBMITTER_CONTAINER, "image": spec.image_uri,
            "resources": {k: dict(v) for k, v in SUBMITTER_RESOURCES.items()},
            # The image's NVIDIA runtime hook fails on the CPU node unless told there is no GPU.
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
            "securityContext": dict(CONTAINER_SECURITY),
        }],
    }}


def train_entrypoint(args: dict[str, object]) -> str:
    """`python -m training.train` with one --flag=value per option (booleans as --flag / --no-flag);
    the = form keeps a value that starts with '-' from being read as an option."""
    parts = ["python", "-m", "training.train"]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + key.replace("_", "-"))
        elif value is not None:
            parts.append(f"{flag}={value}")
    return " ".join(shlex.quote(p) for p in parts)


# Stands in for the deploy-time storage path and the ConfigMap's name while the job's name is digested.
_NAMING_STORAGE = "s3://<bucket>/runs"
_NAMING_CONFIGMAP = "<job>-trainer"
_NAMING_REGISTRY = "<cache>"


# Trainer options that say how many GPUs train, and what the planner resolves for that many (the synth's auto
# picks and predictions): they change how a run trains, not what it learns, so a run keeps its name (and
# checkpoints) across them.
WORLD_SIZE_OPTIONS = ("workers", "micro_batch", "activation_checkpointing", "sharding", "predicted_step_seconds",
                      "predicted_link_gbps")
# Where the run is reported, not what it trains: a run that gets a tracker keeps its name and checkpoints.
TRACKING_OPTIONS = ("tracking", "mlflow_tracking_uri", "mlflow_experiment", "wandb_project", "wandb_entity")
# training/tracking.py reads the W&B key's secret from this variable (the trainer is not imported at synth).
WANDB_SECRET_ENV = "WANDB_API_KEY_SECRET"


@dataclass(frozen=True)
class RayJobSpec:
    namespace: str
    cluster: RayClusterSpec
    trainer_options: dict
    """The trainer's options from the settings, plus the world size (workers)."""
    storage_path: str
    """Where runs go; may hold a deploy-time token (the bucket name), so it is not part of any name."""
    rerun: int = 0
    """A new number is a new run of the same settings, from the start (a new run folder)."""
    cache_dir: str = MODEL_CACHE_MOUNT
    active_deadline_seconds: int = 4 * 3600
    pre_running_deadline_seconds: int = 1200
    """KubeRay fails an attempt whose Ray cluster is not running this long after it started
    (PreRunningDeadlineExceeded, retried under backoff_limit): a GPU node that launched while its partner
    was refused capacity bills this long per attempt, not until the active deadline."""
    backoff_limit: int = 1
    """Retries of the whole job, each on a fresh RayCluster (rayjob_controller.go checkBackoffLimitAndUpdateStatusIfNeeded)."""
    submitter_backoff_limit: int = 2
    """Retries of the submitter pod that runs `ray job submit` (createNewK8sJob)."""
    ttl_seconds_after_finished: int = 300
    """How long the finished job's RayCluster (and GPU nodes) stay, so that logs can be read."""
    auto_line: str | None = None
    """What the planner picked for the options left to auto, and why (an annotation for the synth review); the
    options themselves arrive resolved."""

    def __post_init__(self) -> None:
        # rayjob_controller.go (KubeRay v1.7.0) checks activeDeadlineSeconds before preRunningDeadlineSeconds
        # on every reconcile of an initializing job, and never retries DeadlineExceeded
        # (checkBackoffLimitAndUpdateStatusIfNeeded): a pre-running deadline not below it would never fire.
        if not 0 < self.pre_running_deadline_seconds < self.active_deadline_seconds:
            raise ConstructError(
                f"RayJob: preRunningDeadlineSeconds {self.pre_running_deadline_seconds} must be positive and below "
                f"activeDeadlineSeconds {self.active_deadline_seconds} (KubeRay checks the active deadline first "
                "and never retries it)")

    @property
    def trainer_hash(self) -> str:
        return self.cluster.trainer_hash

    @property
    def run_name(self) -> str:
        """What the run is: its options, the trainer's code and the rerun number. A retry or a new image
        under the same run name resumes its checkpoints. The world size (workers, from gpu_node_count) is not
        part of it: the trainer resumes a run on another number of GPUs at the same global batch, so a
        deploy with fewer nodes continues the run. Nor is the tracker: turning it on continues the run."""
        naming = {k: v for k, v in self.trainer_options.items() if k not in WORLD_SIZE_OPTIONS + TRACKING_OPTIONS}
        base = f"ft-{digest([naming, self.trainer_hash])}"
        return f"{base}-r{self.rerun}" if self.rerun else base

    @property
    def name(self) -> str:
        """The job: its run and a digest of everything it holds, so any change is a new RayJob."""
        pulled = f"{_NAMING_REGISTRY}/{self.cluster.image}" if self.cluster.pulled_image else None
        named = dataclasses.replace(self, cluster=dataclasses.replace(self.cluster, pulled_image=pulled))
        return f"{self.run_name}-{digest(_job_spec(named, _NAMING_STORAGE, _NAMING_CONFIGMAP))}"

    @property
    def configmap_name(self) -> str:
        return f"{self.name}-trainer"

    def entrypoint(self, storage_path: str | None = None) -> str:
        return train_entrypoint({**self.trainer_options, "storage_path": storage_path or self.storage_path,
                                 "run_name": self.run_name, "cache_dir": self.cache_dir})


def _job_spec(job: RayJobSpec, storage_path: str, configmap_name: str) -> dict:
    return {
        "entrypoint": job.entrypoint(storage_path),
        "rayClusterSpec": ray_cluster_spec(job.cluster, configmap_name),
        "submissionMode": "K8sJobMode",
        # The RayCluster goes when the job is over, after the TTL (rayjob_controller.go handleShutdownAfterJobFinishes);
        # the finished submitter Job stays, with the driver's log.
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": job.ttl_seconds_after_finished,
        "activeDeadlineSeconds": job.active_deadline_seconds,
        # Counted from each attempt's start (initRayJobStatusIfNeed resets StartTime), until the job runs.
        "preRunningDeadlineSeconds": job.pre_running_deadline_seconds,
        # Allowed now that the job owns its cluster (validation.go ValidateRayJobSpec refuses it only with a
        # clusterSelector): a failed job is retried on a new RayCluster, resuming from the run's checkpoints.
        "backoffLimit": job.backoff_limit,
        "submitterConfig": {"backoffLimit": job.submitter_backoff_limit},
        "submitterPodTemplate": submitter_pod_template(job.cluster),
    }


def ray_job_manifest(job: RayJobSpec) -> dict:
    annotations = {"eks-fsdp-efa/trainer-hash": job.trainer_hash} | ({AUTO_ANNOTATION: job.auto_line} if job.auto_line else {})
    if job.cluster.pulled_image:
        annotations[IMAGE_SOURCE_ANNOTATION] = job.cluster.image
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": job.name, "namespace": job.namespace,
                     "labels": {"eks-fsdp-efa/run": job.run_name}, "annotations": annotations},
        "spec": _job_spec(job, job.storage_path, job.configmap_name),
    }


def job_configmap(job: RayJobSpec) -> dict:
    """The trainer files of this job, under the job's name."""
    return trainer_configmap(job.configmap_name, job.namespace, job.cluster.trainer_files)
