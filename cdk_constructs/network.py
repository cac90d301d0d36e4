"""The VPC: public subnets for NAT only, private subnets for nodes, flow logs on."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct


@dataclass(frozen=True)
class NetworkProps:
    availability_zones: tuple[str, ...]
    cidr: str = "10.0.0.0/16"
    nat_gateways: int = 1
    private_subnet_mask: int = 19
    """Private subnets are large: with the VPC CNI every pod takes a VPC address."""
    public_subnet_mask: int = 24


class Network(Construct):
    """A VPC whose nodes live in private subnets and reach the internet through NAT."""

    def __init__(self, scope: Construct, id: str, props: NetworkProps) -> None:
        super().__init__(scope, id)
        if props.nat_gateways > len(props.availability_zones):
            raise ValueError("nat_gateways: at most one per availability zone")
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
                    cidr_mask=props.public_subnet_mask, map_public_ip_on_launch=False,
                ),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=props.private_subnet_mask,
                ),
            ],
        )
        flow_log_group = logs.LogGroup(
            self, "FlowLogs", retention=logs.RetentionDays.ONE_MONTH,
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
