"""Namespace, trainer ConfigMap, checkpoint bucket with pod access, RayCluster and the RayJob."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from cdk_nag import NagPackSuppression, NagSuppressions

from cdk_constructs import ray_manifests as rm

TRAINER_PACKAGE = Path(__file__).resolve().parent.parent / "training"


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


@dataclass(frozen=True)
class TrainingWorkloadProps:
    cluster: eks.Cluster
    image: str
    worker_replicas: int
    gpus_per_worker: int
    efa_per_worker: int
    cpu_per_worker: int
    memory_gib_per_worker: int
    train_args: dict
    """Settings of `python -m training.train` (storage path and workers are added here)."""
    gpu_taint: bool = True
    namespace: str = "training"
    cluster_name: str = "fsdp"
    job_name: str = "fsdp-finetune"
    active_deadline_seconds: int = 4 * 3600
    backoff_limit: int = 1
    bucket_auto_delete: bool = False


class TrainingWorkload(Construct):
    def __init__(self, scope: Construct, id: str, props: TrainingWorkloadProps) -> None:
        super().__init__(scope, id)
        cluster = props.cluster
        self.props = props
        self.namespace = eks.KubernetesManifest(
            self, "Namespace", cluster=cluster, manifest=[rm.namespace_manifest(props.namespace)])

        files = rm.trainer_files(TRAINER_PACKAGE)
        trainer_hash = rm.content_hash(files)
        configmap_name = f"trainer-{trainer_hash}"  # a changed trainer is a new ConfigMap
        self.configmap = eks.KubernetesManifest(
            self, "Trainer", cluster=cluster, manifest=[rm.trainer_configmap(configmap_name, props.namespace, files)])
        self.configmap.node.add_dependency(self.namespace)

        self.bucket = s3.Bucket(
            self, "Checkpoints",
            encryption=s3.BucketEncryption.S3_MANAGED, enforce_ssl=True, versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            removal_policy=RemovalPolicy.DESTROY if props.bucket_auto_delete else RemovalPolicy.RETAIN,
            auto_delete_objects=props.bucket_auto_delete,
        )
        NagSuppressions.add_resource_suppressions(self.bucket, [NagPackSuppression(
            id="AwsSolutions-S1",
            reason="Checkpoint bucket written only by the training pods' role; audit with CloudTrail data events "
            "rather than a second, unencrypted-by-default access-log bucket.")])
        # EKS Pod Identity: the agent serves credentials at AWS_CONTAINER_CREDENTIALS_FULL_URI,
        # which boto3 and pyarrow's S3 filesystem (AWS SDK for C++, Ray Train storage) both read.
        self.service_account = eks.ServiceAccount(
            self, "RayServiceAccount", cluster=cluster, name="ray", namespace=props.namespace,
            identity_type=eks.IdentityType.POD_IDENTITY,
        )
        self.service_account.node.add_dependency(self.namespace)
        grant_checkpoint_access(self.bucket, self.service_account.role)

        spec = rm.RayClusterSpec(
            name=props.cluster_name, namespace=props.namespace, image=props.image,
            service_account=self.service_account.service_account_name,
            configmap_name=configmap_name, trainer_paths=tuple(files), trainer_hash=trainer_hash,
            worker_replicas=props.worker_replicas, gpus_per_worker=props.gpus_per_worker,
            efa_per_worker=props.efa_per_worker, cpu_per_worker=props.cpu_per_worker,
            memory_gib_per_worker=props.memory_gib_per_worker, gpu_taint=props.gpu_taint,
        )
        self.ray_cluster = eks.KubernetesManifest(
            self, "RayCluster", cluster=cluster, manifest=[rm.ray_cluster_manifest(spec)])
        self.ray_cluster.node.add_dependency(self.configmap, self.service_account)

        storage_path = f"s3://{self.bucket.bucket_name}/runs"
        args = {**props.train_args, "workers": props.worker_replicas * props.gpus_per_worker,
                "storage_path": storage_path, "run_name": props.job_name}
        self.ray_job = eks.KubernetesManifest(
            self, "RayJob", cluster=cluster,
            manifest=[rm.ray_job_manifest(props.job_name, props.namespace, props.cluster_name,
                                          rm.train_entrypoint(args), props.active_deadline_seconds, props.backoff_limit)])
        self.ray_job.node.add_dependency(self.ray_cluster)
