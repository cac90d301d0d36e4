"""Managed node groups: a CPU system group and an EFA-enabled GPU group in one AZ."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Sequence

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IDependable

from cdk_constructs.instance_types import (CAPACITY_TYPES, INSTANCE_TYPES, PRICE_METADATA, InstanceSpec,
                                           efa_network_interfaces)

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_NODE_LABELS = {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}
# Cluster Autoscaler's AWS provider treats a node with this label as a GPU node whose GPUs are still
# coming (the device plugin registers them after the node is Ready), instead of scaling up again.
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# Read by Cluster Autoscaler from the group's tags (DescribeNodegroup) for a node it has not seen yet.
AUTOSCALER_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/"
SYSTEM_NODE_LABELS = {"role": "system"}

# EFA registers memory with the device and needs an unlimited memlock rlimit, which a container inherits
# from containerd; the AL2023 AMIs leave containerd at 8 MiB (README, "Shared knowledge: memlock").
MEMLOCK_DROP_IN = "/etc/systemd/system/containerd.service.d/90-memlock.conf"
_USER_DATA_BOUNDARY = "==EKS-FSDP-EFA=="


def memlock_user_data() -> str:
    """The GPU nodes' user data: a drop-in giving containerd LimitMEMLOCK=infinity.

    MIME multipart, which EKS requires of a managed node group's launch template user data (it adds its
    own nodeadm part). A shell part runs in cloud-final.service, and amazon-eks-ami's
    templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service orders nodeadm
    `After=nodeadm-config.service cloud-final.service`: nodeadm starts containerd and the kubelet
    (nodeadm/internal/containerd/daemon.go EnsureRunning) once the drop-in is there. try-restart applies it
    to a containerd that an earlier unit already started, and starts none that is not running.
    """
    script = "\n".join([
        "#!/bin/bash",
        "set -euo pipefail",
        f"mkdir -p {MEMLOCK_DROP_IN.rsplit('/', 1)[0]}",
        f"printf '[Service]\\nLimitMEMLOCK=infinity\\n' > {MEMLOCK_DROP_IN}",
        "systemctl daemon-reload",
        "systemctl try-restart containerd",
    ])
    return "\n".join([
        "MIME-Version: 1.0",
        f'Content-Type: multipart/mixed; boundary="{_USER_DATA_BOUNDARY}"',
        "",
        f"--{_USER_DATA_BOUNDARY}",
        'Content-Type: text/x-shellscript; charset="us-ascii"',
        "",
        script,
        "",
        f"--{_USER_DATA_BOUNDARY}--",
        "",
    ])


def launch_template_data(
    disk_gib: int,
    network_interfaces: list[dict] | None = None,
    placement_group_name: str | None = None,
    capacity_reservation_id: str | None = None,
    user_data: str | None = None,
    capacity_block_instance_type: str | None = None,
) -> dict:
    """Launch-template data shared by both node groups.

    IMDSv2 only, with hop limit 1: a container one network hop away cannot reach it, so no pod
    can take the node role. The pods that need AWS use EKS Pod Identity; those that need IMDS
    (aws-node, kube-proxy, the Pod Identity agent) run on the host network. An encrypted gp3
    root volume. No subnet and no instance profile: the node group sets both.

    A Capacity Block (EKS User Guide, "Create a managed node group with Capacity Blocks for ML"): the launch template
    holds InstanceMarketOptions MarketType capacity-block, the block as CapacityReservationTarget, and the instance
    type, which the node group then may not name (EKS User Guide, "Customize managed nodes with launch templates").
    """
    data: dict = {
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1, "HttpEndpoint": "enabled"},
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/xvda",
                "Ebs": {"VolumeSize": disk_gib, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True},
            }
        ],
    }
    if network_interfaces:
        data["NetworkInterfaces"] = network_interfaces
    if placement_group_name:
        data["Placement"] = {"GroupName": placement_group_name}
    if user_data:
        data["UserData"] = base64.b64encode(user_data.encode()).decode()
    if capacity_reservation_id:
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": capacity_reservation_id}
        }
    if capacity_block_instance_type:
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
        data["InstanceType"] = capacity_block_instance_type
    return data


def node_role(scope: Construct) -> iam.Role:
    """What a node itself needs: join the cluster (and serve Pod Identity), pull images.

    No AmazonEKS_CNI_Policy (the VPC CNI has its own role, cdk_constructs/vpc_cni.py) and ECR
    pull-only rather than read-only (which also lists and describes every repository).
    """
    return iam.Role(
        scope, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name)
                          for name in ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly")],
    )


def _launch_template(scope: Construct, data: dict) -> ec2.CfnLaunchTemplate:
    template = ec2.CfnLaunchTemplate(
        scope, "LaunchTemplate", launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty()
    )
    # The raw CloudFormation shape is clearer here than the L2's partial coverage of EFA.
    template.add_property_override("LaunchTemplateData", data)
    return template


@dataclass(frozen=True)
class SystemNodeGroupProps:
    cluster: eks.Cluster
    instance_type: str = "m7i.xlarge"
    node_count: int = 1
    disk_gib: int = 80
    """The Ray head runs here from the multi-GiB training image (the reference used 80 GiB)."""
    requires: Sequence[IDependable] = ()
    """What must exist before nodes join: the VPC CNI add-on with its own credentials."""


class SystemNodeGroup(Construct):
    """CPU nodes for the KubeRay operator, the Ray head and cluster add-ons."""

    def __init__(self, scope: Construct, id: str, props: SystemNodeGroupProps) -> None:
        super().__init__(scope, id)
        template = _launch_template(self, launch_template_data(props.disk_gib))
        self.role = node_role(self)
        self.nodegroup = props.cluster.add_nodegroup_capacity(
            "SystemNodes", node_role=self.role,
            instance_types=[ec2.InstanceType(props.instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=props.node_count, desired_size=props.node_count, max_size=props.node_count,
            labels=dict(SYSTEM_NODE_LABELS),
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            launch_template_spec=eks.LaunchTemplateSpec(id=template.ref, version=template.attr_latest_version_number),
        )
        if props.requires:
            self.nodegroup.node.add_dependency(*props.requires)


@dataclass(frozen=True)
class GpuNodeGroupProps:
    cluster: eks.Cluster
    subnet: ec2.ISubnet
    instance_type: str = "g6.12xlarge"
    node_count: int = 2
    disk_gib: int = 200
    taint: bool = True
    placement_group: bool = True
    capacity_reservation_id: str | None = None
    capacity_type: str = "on-demand"
    """on-demand, spot or capacity-block (the reservation is then a Capacity Block)."""
    price: dict | None = None
    """What one node costs per hour and why (stacks.lookups.PriceBasis.as_metadata): the template's metadata for the
    review and the measured bill."""
    scale_to_zero: bool = True
    """0 to node_count nodes, created with none (Cluster Autoscaler starts them); else node_count always."""
    requires: Sequence[IDependable] = ()
    """What must exist before nodes join: the VPC CNI add-on with its own credentials."""


def gpu_node_labels(spec: InstanceSpec) -> dict[str, str]:
    return {**GPU_NODE_LABELS, ACCELERATOR_LABEL: f"nvidia-{spec.gpu_model.lower()}"}


def gpu_node_tags(spec: InstanceSpec) -> dict[str, str]:
    """The extended resources a GPU node will offer once its device plugins run: the autoscaler's
    instance table knows the GPUs but not the EFA interfaces."""
    return {AUTOSCALER_RESOURCE_TAG + "vpc.amazonaws.com/efa": str(spec.efa_interfaces)}


class GpuNodeGroup(Construct):
    """GPU nodes with every EFA interface the type offers, packed in a cluster placement group."""

    def __init__(self, scope: Construct, id: str, props: GpuNodeGroupProps) -> None:
        super().__init__(scope, id)
        spec = INSTANCE_TYPES.get(props.instance_type)
        if spec is None or not spec.supports_efa:
            raise ValueError(f"gpu instance type {props.instance_type!r}: not an EFA type in the instance table")
        self.spec = spec
        vpc = props.cluster.vpc
        # EFA's OS-bypass traffic must be allowed to and from the group itself, both ways.
        self.efa_security_group = ec2.SecurityGroup(
            self, "EfaSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description="EFA: all traffic between GPU nodes",
        )
        self.efa_security_group.add_ingress_rule(self.efa_security_group, ec2.Port.all_traffic(), "EFA from peers")
        self.efa_security_group.add_egress_rule(self.efa_security_group, ec2.Port.all_traffic(), "EFA to peers")
        self.placement_group = (
            ec2.CfnPlacementGroup(self, "PlacementGroup", strategy="cluster") if props.placement_group else None
        )
        interfaces = efa_network_interfaces(
            spec, [props.cluster.cluster_security_group_id, self.efa_security_group.security_group_id]
        )
        capacity_block = props.capacity_type == "capacity-block"
        if capacity_block and not props.capacity_reservation_id:
            raise ValueError("GPU node group: a capacity-block group needs the Capacity Block's reservation id")
        self.launch_template = _launch_template(
            self,
            launch_template_data(
                props.disk_gib,
                network_interfaces=interfaces,
                placement_group_name=self.placement_group.ref if self.placement_group else None,
                capacity_reservation_id=props.capacity_reservation_id,
                user_data=memlock_user_data(),
                capacity_block_instance_type=props.instance_type if capacity_block else None,
            ),
        )
        self.role = node_role(self)
        # What DescribeNodegroup will return for the group: Cluster Autoscaler's template node comes from it.
        self.described = {
            "labels": gpu_node_labels(spec), "tags": gpu_node_tags(spec), "capacityType": CAPACITY_TYPES[props.capacity_type],
            "taints": [{"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NO_SCHEDULE"}] if props.taint else [],
        }
        low = 0 if props.scale_to_zero else props.node_count
        self.nodegroup = props.cluster.add_nodegroup_capacity(
            "GpuNodes", node_role=self.role,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=eks.CapacityType(CAPACITY_TYPES[props.capacity_type]),
            # Created empty when scaling from zero: `cdk deploy` never waits on GPU capacity, nor rolls back for it.
            min_size=low, desired_size=low, max_size=props.node_count,
            labels=dict(self.described["labels"]), tags=dict(self.described["tags"]),
            taints=[eks.TaintSpec(key=GPU_TAINT["key"], value=GPU_TAINT["value"], effect=eks.TaintEffect.NO_SCHEDULE)]
            if props.taint else None,
            subnets=ec2.SubnetSelection(subnets=[props.subnet]),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref, version=self.launch_template.attr_latest_version_number
            ),
        )
        # Set on the resource, not through instance_types: aws-cdk-lib's GPU-architecture table
        # lacks some EFA types (p5) and would refuse the NVIDIA AMI; our own table validated it. A Capacity
        # Block's type is in the launch template, and EKS refuses it in both places.
        cfn_nodegroup = self.nodegroup.node.default_child
        if not capacity_block:
            cfn_nodegroup.add_property_override("InstanceTypes", [props.instance_type])
        if props.price is not None:
            cfn_nodegroup.add_metadata(PRICE_METADATA, props.price)
        if props.requires:
            self.nodegroup.node.add_dependency(*props.requires)
