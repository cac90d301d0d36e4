"""The one stack: network, EKS, node groups, and the software that trains on deploy."""

from __future__ import annotations

from aws_cdk import Annotations, CfnOutput, Environment, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from cdk_constructs.cluster import EksCluster, EksClusterProps
from cdk_constructs.cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerProps
from cdk_constructs.device_plugins import DevicePlugins, DevicePluginsProps
from cdk_constructs.image_cache import ImagePullThroughCache, ImagePullThroughCacheProps
from cdk_constructs.instance_types import INSTANCE_TYPES, worker_pod_resources
from cdk_constructs.kuberay import KubeRayOperator, KubeRayOperatorProps
from cdk_constructs.log_groups import RETENTION_DAYS, LambdaLogGroups, logs_encryption_key
from cdk_constructs.network import Network, NetworkProps
from cdk_constructs.node_groups import GpuNodeGroup, GpuNodeGroupProps, SystemNodeGroup, SystemNodeGroupProps
from cdk_constructs.observability import Observability, ObservabilityProps
from cdk_constructs.training_workload import TrainingWorkload, TrainingWorkloadProps
from cdk_constructs.vpc_cni import VpcCni, VpcCniProps
from stacks.lookups import price_basis
from stacks.nag import add_nag_suppressions
from stacks.outputs import job_outputs
from stacks.settings import Settings, planned_trainer_options, termination_grace
from stacks.validation import access_entry_principal, reproducibility_warnings


class EfaTrainingStack(Stack):
    def __init__(self, scope: Construct, id: str, settings: Settings) -> None:
        super().__init__(
            scope, id,
            env=Environment(account=settings.account, region=settings.region),
            description="EKS + EFA + Ray Train FSDP fine-tuning of Qwen2.5 (eks-fsdp-efa)")
        self.settings = settings
        self.log_retention = RETENTION_DAYS[settings.log_retention_days]
        self.logs_key = logs_encryption_key(self, "LogsKey")
        self._add_network()
        self._add_cluster()
        self._add_node_groups()
        self._add_cluster_software()
        self._add_image_cache()
        self._add_training()
        self._add_autoscaler()
        self._add_observability()
        self._add_outputs()
        self._add_log_retention()
        for key, value in settings.tags.items():
            Tags.of(self).add(key, value)
        add_nag_suppressions(self, self.cluster, endpoint_cidrs_unset=settings.endpoint_public_cidrs is None)

    @property
    def availability_zones(self) -> list[str]:
        # From settings, so synth never looks AZs up in an account.
        return list(self.settings.availability_zones)

    def _add_network(self) -> None:
        s = self.settings
        self.network = Network(
            self, "Network",
            NetworkProps(availability_zones=s.availability_zones, cidr=s.vpc_cidr, nat_gateways=s.nat_gateways,
                         flow_log_retention=self.log_retention, log_encryption_key=self.logs_key))

    def _add_cluster(self) -> None:
        s = self.settings
        admin_arn, admin_note = access_entry_principal(s.admin_principal_arn) if s.admin_principal_arn else (None, None)
        self.eks = EksCluster(
            self, "Eks",
            EksClusterProps(
                vpc=self.network.vpc, cluster_name=s.eks_cluster_name, kubernetes_version=s.kubernetes_version,
                endpoint_access=s.endpoint_access, endpoint_public_cidrs=s.endpoint_public_cidrs or (),
                admin_principal_arn=admin_arn, admin_principal_note=admin_note, log_retention=self.log_retention,
                log_encryption_key=self.logs_key))
        self.cluster = self.eks.cluster
        self.vpc_cni = VpcCni(self, "VpcCni", VpcCniProps(cluster=self.cluster, cluster_name=s.eks_cluster_name))

    def _add_node_groups(self) -> None:
        s = self.settings
        self.system_nodes = SystemNodeGroup(
            self, "System",
            SystemNodeGroupProps(cluster=self.cluster, instance_type=s.system_instance_type,
                                 node_count=s.system_node_count, disk_gib=s.system_node_disk_gib,
                                 requires=(self.vpc_cni.addon,)))
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
                capacity_type=s.gpu_capacity_type,
                # The spot price preflight cached comes in as context from cdk.context.json, as CDK's lookups do.
                price=price_basis(s, self.node.get_all_context()).as_metadata(),
                scale_to_zero=s.gpu_scale_to_zero,
                requires=(self.vpc_cni.addon,)))

    def _add_cluster_software(self) -> None:
        s = self.settings
        self.device_plugins = DevicePlugins(
            self, "DevicePlugins",
            DevicePluginsProps(cluster=self.cluster, gpu_instance_type=s.gpu_instance_type, gpu_taint=s.gpu_node_taint,
                               requires=(self.gpu_nodes.nodegroup,)))
        self.kuberay = KubeRayOperator(
            self, "KubeRay", KubeRayOperatorProps(cluster=self.cluster, requires=(self.system_nodes.nodegroup,)))

    def _add_image_cache(self) -> None:
        s = self.settings
        self.image_cache = None
        if not s.image_pull_through_cache:
            return
        # Endpoints in the GPU AZ only: they bill per AZ, and the system nodes reach them across AZs.
        self.image_cache = ImagePullThroughCache(self, "ImageCache", ImagePullThroughCacheProps(
            vpc=self.network.vpc,
            subnets=ec2.SubnetSelection(subnets=[self.network.private_subnet_in(s.gpu_availability_zone)]),
            pullers=(self.system_nodes.role, self.gpu_nodes.role), vpc_cidr=s.vpc_cidr))

    def _add_training(self) -> None:
        s, t = self.settings, self.settings.training
        for key, text in reproducibility_warnings(s):
            Annotations.of(self).add_warning_v2(key, text)
        spec = INSTANCE_TYPES[s.gpu_instance_type]
        pod = worker_pod_resources(spec)
        options, auto_line = planned_trainer_options(s)
        self.training = TrainingWorkload(
            self, "Training",
            TrainingWorkloadProps(
                cluster=self.cluster, cluster_name=s.eks_cluster_name, image=t.image, worker_replicas=s.gpu_node_count,
                gpus_per_worker=spec.gpus, efa_per_worker=spec.efa_interfaces,
                cpu_per_worker=pod["cpu"], memory_gib_per_worker=pod["memory_gib"], gpu_taint=s.gpu_node_taint,
                trainer_options=options, auto_line=auto_line, requires=(self.kuberay, self.device_plugins),
                rerun=t.rerun, active_deadline_seconds=t.active_deadline_seconds, backoff_limit=s.backoff_limit,
                submitter_backoff_limit=t.submitter_backoff_limit, ttl_seconds_after_finished=t.ttl_seconds_after_finished,
                bucket_auto_delete=t.checkpoint_bucket_auto_delete, operator_namespace=self.kuberay.namespace,
                kubernetes_version=s.kubernetes_version, region=s.region, ray_version=t.ray_version,
                hf_token_secret=t.hf_token_secret, pre_running_deadline_seconds=t.pre_running_deadline_seconds,
                wandb_api_key_secret=t.wandb_api_key_secret,
                termination_grace_period_seconds=termination_grace(s, options)[0],
                pulled_image=self.image_cache.image(t.image) if self.image_cache else None))
        if self.image_cache:
            self.training.ray_job.node.add_dependency(self.image_cache)

    def _add_autoscaler(self) -> None:
        s = self.settings
        if not s.gpu_scale_to_zero:
            return
        self.autoscaler = ClusterAutoscaler(
            self, "ClusterAutoscaler",
            ClusterAutoscalerProps(cluster=self.cluster, cluster_name=s.eks_cluster_name, region=s.region,
                                   gpu_nodegroup=self.gpu_nodes.nodegroup, gpu_instance=self.gpu_nodes.spec,
                                   gpu_nodegroup_described=self.gpu_nodes.described,
                                   pending_pod=self.training.worker_pod, kubernetes_version=s.kubernetes_version,
                                   scale_down_delay_minutes=s.gpu_scale_down_delay_minutes,
                                   requires=(self.system_nodes.nodegroup,)))

    def _add_observability(self) -> None:
        self.observability = Observability(self, "Observability", ObservabilityProps(
            cluster=self.cluster, cluster_name=self.settings.eks_cluster_name, retention=self.log_retention,
            encryption_key=self.logs_key, requires=(self.system_nodes.nodegroup,)))
        # Fluent Bit starts reading at the end of existing logs (READ_FROM_HEAD Off): a pod that started
        # before it would lose its first lines, so the job waits for the add-on.
        self.training.ray_job.node.add_dependency(self.observability.addon)

    def _add_outputs(self) -> None:
        w = self.training
        for key, value in job_outputs(self.region, self.cluster.cluster_name, w.props.namespace, w.job_name,
                                      w.bucket.bucket_name, w.run_name).items():
            CfnOutput(self, key, value=value)

    def _add_log_retention(self) -> None:
        # Last: the Lambda functions of aws-cdk-lib's providers exist once everything else is built.
        self.lambda_logs = LambdaLogGroups(self, "LambdaLogs", target=self, retention=self.log_retention,
                                           encryption_key=self.logs_key)
