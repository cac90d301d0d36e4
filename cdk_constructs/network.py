"""The VPC: public subnets for NAT only, private subnets for nodes, flow logs on."""

from __future__ import annotations

from dataclasses import dataclass

import ipaddress

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

MAX_AVAILABILITY_ZONES = 7


def subnet_masks(cidr: str) -> tuple[int, int]:
    """(public, private) subnet prefix lengths for a VPC of this range.

    Private subnets are large, an eighth of the VPC each (with the VPC CNI every pod takes a VPC
    address): /19 in a /16, /23 in a /20. The public subnets (NAT only) are at most /24 and
    together fit in the first eighth, which the allocator fills before the private ones. So up
    to seven AZs fit in any VPC from /16 to /20.
    """
    prefix = ipaddress.IPv4Network(cidr).prefixlen
    return max(24, prefix + 6), prefix + 3


@dataclass(frozen=True)
class NetworkProps:
    availability_zones: tuple[str, ...]
    cidr: str = "10.0.0.0/16"
    nat_gateways: int = 1
    flow_log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    log_encryption_key: kms.IKey | None = None


class Network(Construct):
    """A VPC whose nodes live in private subnets and reach the internet through NAT."""

    def __init__(self, scope: Construct, id: str, props: NetworkProps) -> None:
        super().__init__(scope, id)
        if props.nat_gateways > len(props.availability_zones):
            raise ValueError("nat_gateways: at most one per availability zone")
        if len(props.availability_zones) > MAX_AVAILABILITY_ZONES:
            raise ValueError(f"availability_zones: at most {MAX_AVAILABILITY_ZONES} fit the subnet layout")
        public_mask, private_mask = subnet_masks(props.cidr)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(props.cidr),
            availability_zones=list(props.availability_zones),
            nat_gateways=props.nat_gateways,
            restrict_default_security_group=True,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=public_mask, map_public_ip_on_launch=False,
                ),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=private_mask,
                ),
            ],
        )
        # S3 traffic (checkpoints of about 18.5 GB each, model weights) through a free gateway
        # endpoint instead of the NAT gateway, which bills every GB it processes.
        self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
        )
        flow_log_group = logs.LogGroup(
            self, "FlowLogs", retention=props.flow_log_retention, encryption_key=props.log_encryption_key,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.vpc.add_flow_log(
            "FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )

    def private_subnet_in(self, availability_zone: str) -> ec2.ISubnet:
        """The one private subnet of an AZ (the GPU nodes' only subnet)."""
        subnets = self.vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[availability_zone]
        ).subnets
        if len(subnets) != 1:
            raise ValueError(f"expected one private subnet in {availability_zone}, found {len(subnets)}")
        return subnets[0]
