"""The one stack: network, EKS, node groups, and the software that trains on deploy."""

from __future__ import annotations

from aws_cdk import Environment, Stack, Tags
from constructs import Construct

from cdk_constructs.cluster import EksCluster, EksClusterProps
from cdk_constructs.network import Network, NetworkProps
from cdk_constructs.node_groups import GpuNodeGroup, GpuNodeGroupProps, SystemNodeGroup, SystemNodeGroupProps
from stacks.nag import add_nag_suppressions
from stacks.settings import Settings


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
