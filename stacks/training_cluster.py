"""The one stack: network, EKS, node groups, and the software that trains on deploy."""

from __future__ import annotations

from aws_cdk import Annotations, CfnOutput, Environment, Stack, Tags
from constructs import Construct

from cdk_constructs.cluster import EksCluster, EksClusterProps
from cdk_constructs.device_plugins import DevicePlugins, DevicePluginsProps
from cdk_constructs.instance_types import INSTANCE_TYPES, worker_pod_resources
from cdk_constructs.kuberay import KubeRayOperator, KubeRayOperatorProps
from cdk_constructs.network import Network, NetworkProps
from cdk_constructs.node_groups import GpuNodeGroup, GpuNodeGroupProps, SystemNodeGroup, SystemNodeGroupProps
from stacks.nag import add_nag_suppressions
from cdk_constructs.training_workload import TrainingWorkload, TrainingWorkloadProps
from stacks.settings import Settings, image_is_pinned


class EfaTrainingStack(Stack):
    def __init__(self, scope: Construct, id: str, settings: Settings) -> None:
        super().__init__(
            scope, id,
            env=Environment(account=settings.account, region=settings.region),
            description="EKS + EFA + Ray Train FSDP fine-tuning of Qwen2.5 (eks-fsdp-efa)",
        )
        self.settings = settings
        self._add_network()
        self._add_cluster()
        self._add_node_groups()
        self._add_cluster_software()
        self._add_training()
        self._add_outputs()
        for key, value in settings.tags.items():
            Tags.of(self).add(key, value)
        add_nag_suppressions(self, self.cluster)

    @property
    def availability_zones(self) -> list[str]:
        # From settings, so synth never looks AZs up in an account.
        return list(self.settings.availability_zones)

    def _add_network(self) -> None:
        s = self.settings
        self.network = Network(
            self, "Network",
            NetworkProps(availability_zones=s.availability_zones, cidr=s.vpc_cidr, nat_gateways=s.nat_gateways),
        )

    def _add_cluster(self) -> None:
        s = self.settings
        self.eks = EksCluster(
            self, "Eks",
            EksClusterProps(
                vpc=self.network.vpc,
                kubernetes_version=s.kubernetes_version,
                endpoint_access=s.endpoint_access,
                endpoint_public_cidrs=s.endpoint_public_cidrs,
                admin_principal_arn=s.admin_principal_arn,
            ),
        )
        self.cluster = self.eks.cluster

    def _add_node_groups(self) -> None:
        s = self.settings
        self.system_nodes = SystemNodeGroup(
            self, "System",
            SystemNodeGroupProps(cluster=self.cluster, instance_type=s.system_instance_type, node_count=s.system_node_count),
        )
        self.gpu_nodes = GpuNodeGroup(
            self, "Gpu",
            GpuNodeGroupProps(
                cluster=self.cluster,
                subnet=self.network.private_subnet_in(s.gpu_availability_zone),
                instance_type=s.gpu_instance_type,
                node_count=s.gpu_node_count,
                disk_gib=s.gpu_node_disk_gib,
                taint=s.gpu_node_taint,
                placement_group=s.use_placement_group,
                capacity_reservation_id=s.capacity_reservation_id,
            ),
        )

    def _add_cluster_software(self) -> None:
        s = self.settings
        self.device_plugins = DevicePlugins(
            self, "DevicePlugins",
            DevicePluginsProps(cluster=self.cluster, gpu_instance_type=s.gpu_instance_type, gpu_taint=s.gpu_node_taint),
        )
        self.device_plugins.node.add_dependency(self.gpu_nodes.nodegroup)
        self.kuberay = KubeRayOperator(self, "KubeRay", KubeRayOperatorProps(cluster=self.cluster))
        self.kuberay.node.add_dependency(self.system_nodes.nodegroup)

    def _add_training(self) -> None:
        s, t = self.settings, self.settings.training
        if not image_is_pinned(t.image):
            Annotations.of(self).add_warning_v2(
                "eks-fsdp-efa:unpinned-image",
                f"training.image {t.image} is a moving tag; pin vX.Y.Z or a digest for reproducible runs.")
        spec = INSTANCE_TYPES[s.gpu_instance_type]
        pod = worker_pod_resources(spec)
        self.training = TrainingWorkload(
            self, "Training",
            TrainingWorkloadProps(
                cluster=self.cluster, image=t.image, worker_replicas=s.gpu_node_count,
                gpus_per_worker=spec.gpus, efa_per_worker=spec.efa_interfaces,
                cpu_per_worker=pod["cpu"], memory_gib_per_worker=pod["memory_gib"], gpu_taint=s.gpu_node_taint,
                train_args={
                    "model": t.model, "steps": t.steps, "seq_len": t.seq_len, "micro_batch": t.micro_batch,
                    "grad_accum": t.grad_accum, "lr": t.learning_rate, "data": t.data,
                    "activation_checkpointing": t.activation_checkpointing, "compile": t.compile,
                    "loss_chunk_tokens": t.loss_chunk_tokens, "reshard_after_forward": t.reshard_after_forward,
                    "checkpoint_every": t.checkpoint_every,
                    "max_failures": t.max_failures, "require_efa": t.require_efa, "cache_dir": "/mnt/model-cache",
                },
                active_deadline_seconds=t.active_deadline_seconds, backoff_limit=t.backoff_limit,
                bucket_auto_delete=t.checkpoint_bucket_auto_delete,
            ),
        )
        # Order: device plugins and KubeRay (CRDs) before anything that needs them.
        self.training.ray_cluster.node.add_dependency(self.kuberay, self.device_plugins)

    def _add_outputs(self) -> None:
        p = self.training.props
        ns, job = p.namespace, p.job_name
        CfnOutput(self, "Kubeconfig", value=f"aws eks update-kubeconfig --region {self.region} --name {self.cluster.cluster_name}")
        CfnOutput(self, "JobStatus", value=f"kubectl -n {ns} get rayjob {job} -o wide")
        CfnOutput(self, "JobLogs", value=f"kubectl -n {ns} logs -f job/{job}")
        CfnOutput(self, "Dashboard", value=f"kubectl -n {ns} port-forward service/{p.cluster_name}-head-svc 8265:8265")
        CfnOutput(self, "CheckpointBucket", value=self.training.bucket.bucket_name)
        # Read by `make watch` and `make destroy` (tools/watch.py, tools/teardown.py).
        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(self, "Namespace", value=ns)
        CfnOutput(self, "RayJobName", value=job)
