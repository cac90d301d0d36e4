"""The Ray image through an ECR pull-through cache, off the NAT gateway.

Every GPU node a job starts pulls the ~12 GiB image. From ECR Public it comes through the NAT gateway,
which bills each GB it processes ($0.045 in us-east-2): about $1.16 per job start for two nodes. Through a
pull-through cache rule the image is copied once into this account's private registry; the nodes then
reach ECR through interface endpoints (ecr.api, ecr.dkr) and download the layers from S3 (ECR keeps them
there) through the VPC's free S3 gateway endpoint. The trade at one job a day is in the README
("Image pulls: the NAT or a pull-through cache").

The documented pieces (Amazon ECR User Guide):
- the rule: prefix `ecr-public`, upstream `public.ecr.aws` (no credentials for ECR Public);
- the image: `<account>.dkr.ecr.<region>.amazonaws.com/ecr-public/<repository>:<tag>`
  ("Pulling an image with a pull through cache rule");
- the puller needs `ecr:BatchImportUpstreamImage` and, for the first pull that creates the cached
  repository, `ecr:CreateRepository` ("IAM permissions required to sync an upstream registry").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from cdk_constructs.errors import ConstructError

UPSTREAM_REGISTRY = "public.ecr.aws"
CACHE_PREFIX = "ecr-public"


def cached_image(image: str, registry: str) -> str:
    """Where a public.ecr.aws image is pulled from through the cache rule of `registry`
    (<account>.dkr.ecr.<region>.amazonaws.com)."""
    upstream, _, path = image.partition("/")
    if upstream != UPSTREAM_REGISTRY or not path:
        raise ConstructError(f"image pull-through cache: {image!r} is not an image of {UPSTREAM_REGISTRY}; "
                             "set image_pull_through_cache=false for another registry")
    return f"{registry}/{CACHE_PREFIX}/{path}"


@dataclass(frozen=True)
class ImagePullThroughCacheProps:
    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection
    """Where the interface endpoints live: each AZ that holds one bills by the hour."""
    pullers: Sequence[iam.IRole]
    """The node roles whose kubelets pull the image (ECR's credential provider uses the node role)."""
    vpc_cidr: str
    """Who may reach the endpoints (HTTPS): the VPC's nodes, given as text so cdk-nag can read the rule."""


class ImagePullThroughCache(Construct):
    def __init__(self, scope: Construct, id: str, props: ImagePullThroughCacheProps) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.rule = ecr.CfnPullThroughCacheRule(
            self, "Rule", ecr_repository_prefix=CACHE_PREFIX, upstream_registry_url=UPSTREAM_REGISTRY)
        self.endpoints = [
            props.vpc.add_interface_endpoint(name, service=service, subnets=props.subnets, private_dns_enabled=True,
                                             open=False)
            for name, service in (("EcrApi", ec2.InterfaceVpcEndpointAwsService.ECR),
                                  ("EcrDocker", ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER))]
        for endpoint in self.endpoints:
            endpoint.connections.allow_default_port_from(ec2.Peer.ipv4(props.vpc_cidr), "HTTPS from the VPC's nodes")
        self.registry = f"{stack.account}.dkr.ecr.{stack.region}.{stack.url_suffix}"
        cached = stack.format_arn(service="ecr", resource="repository", resource_name=f"{CACHE_PREFIX}/*")
        for role in props.pullers:
            # AmazonEC2ContainerRegistryPullOnly reads any repository; the cache's two writes stay on its prefix.
            role.add_to_principal_policy(iam.PolicyStatement(
                actions=["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"], resources=[cached]))
            NagSuppressions.add_resource_suppressions(role, [NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="The pull-through cache names its repositories after the upstream image at its first pull; "
                       "the import and create rights stay on the cache's ecr-public/ prefix.",
                applies_to=[{"regex": "/^Resource::arn:<AWS::Partition>:ecr:.*:repository\\/ecr-public\\/\\*$/"}])],
                apply_to_children=True)

    def image(self, upstream_image: str) -> str:
        return cached_image(upstream_image, self.registry)
