"""Namespace, checkpoint bucket with pod access, and the run: one RayJob that owns its RayCluster.

How a second deploy behaves follows from three facts. KubeRay ignores a changed rayClusterSpec on a
RayJob that exists (rayjob_controller.go getOrCreateRayClusterInstance), so a change must be a new
RayJob: its name is a digest of everything in it. aws-cdk-lib's kubectl handler deletes a manifest
resource's objects with the resource, so two resources carrying an object of one name would delete
each other's (or, created with `kubectl create`, fail the deploy and leave what they made behind);
so nothing of one job carries another job's name: the trainer ConfigMap is named after its job. And
the job and its ConfigMap are one manifest resource
whose construct id carries the job's name, so a changed job is a new CloudFormation resource:
CloudFormation creates the new objects, then deletes the old ones in its cleanup phase (the old
RayJob, whose finalizer stops its Ray job and whose RayCluster goes with it, and its ConfigMap).
The new job's workers schedule once the old ones have freed the GPU nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct, IDependable

from cdk_constructs import kuberay_rules
from cdk_constructs import ray_manifests as rm
from cdk_constructs.network_policies import training_network_policies
from cdk_constructs.pod_identity import pod_identity_role
from cdk_constructs.tracking_access import grant_tracking_access

TRAINER_PACKAGE = Path(__file__).resolve().parent.parent / rm.TRAINER_PACKAGE


def grant_checkpoint_access(bucket: s3.IBucket, role: iam.IRole) -> None:
    """Exactly what Ray Train storage and boto3 need on one bucket: objects and multipart uploads."""
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:ListBucket", "s3:GetBucketLocation"], resources=[bucket.bucket_arn]))
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                 "s3:ListMultipartUploadParts"],
        resources=[bucket.arn_for_objects("*")]))
    NagSuppressions.add_resource_suppressions(role, [NagPackSuppression(
        id="AwsSolutions-IAM5",
        reason="Checkpoint and run-summary object keys are created at run time; access is limited to this one bucket.",
        applies_to=[{"regex": "/^Resource::<.*Checkpoints.*\\.Arn>\\/\\*$/"}],
    )], apply_to_children=True)


def checkpoint_lifecycle_rules(noncurrent_days: int) -> list[s3.LifecycleRule]:
    """A versioned bucket keeps every overwritten or deleted checkpoint (about 18.5 GB each) until
    told otherwise: old versions expire after some days, and abandoned multipart uploads after one."""
    return [s3.LifecycleRule(
        id="expire-old-checkpoint-versions",
        noncurrent_version_expiration=Duration.days(noncurrent_days),
        abort_incomplete_multipart_upload_after=Duration.days(1),
        expired_object_delete_marker=True,
    )]


@dataclass(frozen=True)
class TrainingWorkloadProps:
    cluster: eks.Cluster
    cluster_name: str
    """The EKS cluster's name, known at synth: the Pod Identity role trusts this cluster only."""
    image: str
    worker_replicas: int
    gpus_per_worker: int
    efa_per_worker: int
    cpu_per_worker: int
    memory_gib_per_worker: int
    trainer_options: dict
    """The trainer's options with auto resolved (stacks.settings.planned_trainer_options); storage path, run name
    and cache are added here."""
    auto_line: str | None = None
    """What the planner picked for auto, and why: an annotation of the RayJob, for the synth review."""
    requires: Sequence[IDependable] = ()
    """What must run before the RayJob: device plugins (GPU and EFA resources) and KubeRay (CRDs)."""
    gpu_taint: bool = True
    namespace: str = "training"
    service_account: str = "ray"
    operator_namespace: str = "kuberay-system"
    """Where the KubeRay operator runs: the only namespace whose pods may reach the head's job API."""
    kubernetes_version: str = "1.36"
    region: str | None = None
    ray_version: str = "2.58.0"
    hf_token_secret: str | None = None
    wandb_api_key_secret: str | None = None
    """The Secrets Manager secret of the W&B API key (--tracking wandb): its name reaches the workers, and the
    pods' role may read it."""
    rerun: int = 0
    """Part of the run's and the job's names: a new number trains the same settings again, from the start."""
    active_deadline_seconds: int = 4 * 3600
    pre_running_deadline_seconds: int = 1200
    backoff_limit: int = 1
    submitter_backoff_limit: int = 2
    ttl_seconds_after_finished: int = 300
    bucket_auto_delete: bool = False
    noncurrent_checkpoint_days: int = 7
    kuberay_feature_gates: dict[str, bool] = field(default_factory=dict)
    """Gates the operator runs with beyond its defaults (our chart values set none)."""
    trainer_package: Path | None = None
    """The trainer package to ship (default: this repository's training/)."""
    pulled_image: str | None = None
    """Where the pods pull `image` from, when through a pull-through cache (cdk_constructs/image_cache.py)."""
    termination_grace_period_seconds: int = 120
    """The GPU worker pods' grace period (stacks.settings.termination_grace)."""


class TrainingWorkload(Construct):
    def __init__(self, scope: Construct, id: str, props: TrainingWorkloadProps) -> None:
        super().__init__(scope, id)
        cluster = props.cluster
        self.props = props
        # The namespace and what governs every pod in it: Pod Security labels, a default service account
        # without an API token, the Ray pods' service account, and the NetworkPolicies. Applied (not
        # created) because Kubernetes makes the `default` service account on its own.
        self.namespace = eks.KubernetesManifest(
            self, "Namespace", cluster=cluster, overwrite=True,
            manifest=[rm.namespace_manifest(props.namespace, props.kubernetes_version),
                      rm.service_account_manifest("default", props.namespace, automount_token=False),
                      # No API token: Ray reads nothing in the Kubernetes API. EKS Pod Identity still works,
                      # its webhook mounting its own projected token (audience pods.eks.amazonaws.com) into
                      # every pod of an associated account, whatever automountServiceAccountToken says
                      # (amazon-eks-pod-identity-webhook, pkg/handler/handler.go getPodSpecPatch).
                      rm.service_account_manifest(props.service_account, props.namespace, automount_token=False),
                      *training_network_policies(props.namespace, props.operator_namespace)])
        self._add_bucket(props)
        self.role = pod_identity_role(self, "RayRole", props.cluster_name, props.namespace, props.service_account)
        self.pod_identity = eks.CfnPodIdentityAssociation(
            self, "RayPodIdentity", cluster_name=cluster.cluster_name, namespace=props.namespace,
            service_account=props.service_account, role_arn=self.role.role_arn)
        grant_checkpoint_access(self.bucket, self.role)
        grant_tracking_access(self.role, props.trainer_options.get("mlflow_tracking_uri"), props.wandb_api_key_secret)

        files = rm.trainer_files(props.trainer_package or TRAINER_PACKAGE)
        pods = rm.RayClusterSpec(
            image=props.image, service_account=props.service_account, trainer_files=files,
            worker_replicas=props.worker_replicas, gpus_per_worker=props.gpus_per_worker,
            efa_per_worker=props.efa_per_worker, cpu_per_worker=props.cpu_per_worker,
            memory_gib_per_worker=props.memory_gib_per_worker, gpu_taint=props.gpu_taint,
            ray_version=props.ray_version, region=props.region, hf_token_secret=props.hf_token_secret,
            wandb_api_key_secret=props.wandb_api_key_secret,
            pulled_image=props.pulled_image, termination_grace_period_seconds=props.termination_grace_period_seconds,
        )
        self.job_spec = rm.RayJobSpec(
            namespace=props.namespace, cluster=pods, trainer_options=dict(props.trainer_options),
            storage_path=f"s3://{self.bucket.bucket_name}/runs", rerun=props.rerun,
            active_deadline_seconds=props.active_deadline_seconds,
            pre_running_deadline_seconds=props.pre_running_deadline_seconds, backoff_limit=props.backoff_limit,
            submitter_backoff_limit=props.submitter_backoff_limit,
            ttl_seconds_after_finished=props.ttl_seconds_after_finished, auto_line=props.auto_line,
        )
        self.ray_job_manifest = rm.ray_job_manifest(self.job_spec)
        self.configmap_manifest = rm.job_configmap(self.job_spec)
        self._check_with_kuberay(props)

        # One resource for the job and everything named after it; its id changes with the job. Applied, not
        # created: a name is a digest of the job's content, so an object of that name left by a failed deploy
        # is this very job, and applying it again is what a retry of the deploy should do.
        self.ray_job = eks.KubernetesManifest(
            self, f"RayJob-{self.job_spec.name}", cluster=cluster, overwrite=True,
            manifest=[self.configmap_manifest, self.ray_job_manifest])
        self.ray_job.node.add_dependency(self.namespace, self.pod_identity, cluster.eks_pod_identity_agent,
                                         *props.requires)

    @property
    def run_name(self) -> str:
        return self.job_spec.run_name

    @property
    def worker_pod(self) -> dict:
        """The GPU worker's pod spec, as KubeRay creates it from the job."""
        return self.ray_job_manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]

    @property
    def job_name(self) -> str:
        return self.job_spec.name

    def _add_bucket(self, props: TrainingWorkloadProps) -> None:
        self.bucket = s3.Bucket(
            self, "Checkpoints",
            encryption=s3.BucketEncryption.S3_MANAGED, enforce_ssl=True, versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            lifecycle_rules=checkpoint_lifecycle_rules(props.noncurrent_checkpoint_days),
            removal_policy=RemovalPolicy.DESTROY if props.bucket_auto_delete else RemovalPolicy.RETAIN,
            auto_delete_objects=props.bucket_auto_delete,
        )
        NagSuppressions.add_resource_suppressions(self.bucket, [NagPackSuppression(
            id="AwsSolutions-S1",
            reason="Checkpoint bucket written only by the training pods' role; audit with CloudTrail data events "
            "rather than a second, unencrypted-by-default access-log bucket.")])

    def _check_with_kuberay(self, props: TrainingWorkloadProps) -> None:
        """Refuse at synth what KubeRay's controller would refuse after `cdk deploy` reported success.
        Settings cannot cause this (they are validated first), so a violation here is a bug of ours."""
        found = kuberay_rules.violations([self.ray_job_manifest], props.kuberay_feature_gates)
        if found:
            raise ValueError("; ".join(v.line() for v in found))
