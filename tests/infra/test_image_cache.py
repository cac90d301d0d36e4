"""The Ray image through an ECR pull-through cache (cdk_constructs/image_cache.py), checked against the
Amazon ECR User Guide: the cached image's URI ("Pulling an image with a pull through cache rule":
aws_account_id.dkr.ecr.region.amazonaws.com/ecr-public/repository_name/image_name:tag) and the puller's
rights ("IAM permissions required to sync an upstream registry with an Amazon ECR private registry")."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from cdk_constructs.errors import ConstructError
from cdk_constructs.image_cache import ImagePullThroughCache, ImagePullThroughCacheProps, cached_image
from tests.conftest import resources_of, template_for

IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"


def test_the_cached_image_uri_follows_ecrs_documented_form():
    assert cached_image(IMAGE, "111122223333.dkr.ecr.us-east-2.amazonaws.com") == (
        "111122223333.dkr.ecr.us-east-2.amazonaws.com/ecr-public/deep-learning-containers/ray:train-ml-cuda-v1.1")


def test_an_image_of_another_registry_is_refused():
    with pytest.raises(ConstructError, match=r"^image pull-through cache: 'docker.io/rayproject/ray:2.58.0' is not an "
                                             r"image of public.ecr.aws; set image_pull_through_cache=false"):
        cached_image("docker.io/rayproject/ray:2.58.0", "r")


@pytest.fixture(scope="module")
def cache_template():
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111122223333", region="us-east-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    cache = ImagePullThroughCache(stack, "Cache", ImagePullThroughCacheProps(
        vpc=vpc, subnets=ec2.SubnetSelection(subnets=[vpc.private_subnets[0]]), pullers=[role], vpc_cidr="10.0.0.0/16"))
    # The partition's domain (amazonaws.com) resolves at deploy time.
    assert re.fullmatch(r"111122223333\.dkr\.ecr\.us-east-2\.\$\{Token\[AWS\.URLSuffix\.\d+\]\}/ecr-public/"
                        r"deep-learning-containers/ray:train-ml-cuda-v1\.1", cache.image(IMAGE))
    return Template.from_stack(stack)


def test_the_rule_caches_ecr_public_under_its_prefix(cache_template):
    [rule] = resources_of(cache_template, "AWS::ECR::PullThroughCacheRule").values()
    assert rule["Properties"] == {"EcrRepositoryPrefix": "ecr-public", "UpstreamRegistryUrl": "public.ecr.aws"}


def test_the_nodes_reach_ecr_through_both_interface_endpoints_in_one_az(cache_template):
    endpoints = [r["Properties"] for r in resources_of(cache_template, "AWS::EC2::VPCEndpoint").values()
                 if r["Properties"].get("VpcEndpointType") == "Interface"]
    assert sorted(e["ServiceName"] for e in endpoints) == ["com.amazonaws.us-east-2.ecr.api", "com.amazonaws.us-east-2.ecr.dkr"]
    assert all(e["PrivateDnsEnabled"] and len(e["SubnetIds"]) == 1 for e in endpoints)


def test_the_puller_may_import_and_create_only_under_the_cache_prefix(cache_template):
    statements = [s for p in resources_of(cache_template, "AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert statements == [{
        "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"], "Effect": "Allow",
        "Resource": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                       ":ecr:us-east-2:111122223333:repository/ecr-public/*"]]}}]


# ------------------------------------------------------------------ in the stack


def _job_images(template) -> set[str]:
    from tests.infra.test_cluster_software import manifest_of

    spec = manifest_of(template, "RayJob")["spec"]
    pods = [spec["rayClusterSpec"]["headGroupSpec"]["template"], spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
            spec["submitterPodTemplate"]]
    return {pod["spec"]["containers"][0]["image"] for pod in pods}


def test_by_default_every_ray_pod_pulls_through_the_cache(template):
    assert _job_images(template) == {
        "ref-aws::accountid.dkr.ecr.us-east-2.ref-aws::urlsuffix/ecr-public/deep-learning-containers/ray:train-ml-cuda-v1.1"}
    [endpoint_subnets] = {json.dumps(r["Properties"]["SubnetIds"]) for r in resources_of(template, "AWS::EC2::VPCEndpoint").values()
                          if r["Properties"].get("VpcEndpointType") == "Interface"}
    [gpu_group] = [r["Properties"] for r in resources_of(template, "AWS::EKS::Nodegroup").values()
                   if r["Properties"]["Labels"].get("role") == "gpu-worker"]
    assert json.loads(endpoint_subnets) == gpu_group["Subnets"]  # one AZ: the GPU nodes'


def test_the_job_waits_for_the_cache_rule(template):
    from tests.infra.test_observability import _depends_on

    [job] = [k for k, r in resources_of(template, "Custom::AWSCDK-EKS-KubernetesResource").items()
             if '\\"kind\\":\\"RayJob\\"' in json.dumps(r["Properties"]["Manifest"])]
    [rule] = resources_of(template, "AWS::ECR::PullThroughCacheRule")
    assert rule in _depends_on(template, job)


def test_without_the_cache_the_pods_pull_from_ecr_public():
    template = template_for(image_pull_through_cache=False)
    assert _job_images(template) == {IMAGE}
    assert not resources_of(template, "AWS::ECR::PullThroughCacheRule")


def test_only_the_vpcs_nodes_reach_the_endpoints_over_https(cache_template):
    groups = [r["Properties"] for k, r in resources_of(cache_template, "AWS::EC2::SecurityGroup").items() if "Ecr" in k]
    assert len(groups) == 2
    for group in groups:
        assert group["SecurityGroupIngress"] == [{"CidrIp": "10.0.0.0/16", "Description": "HTTPS from the VPC's nodes",
                                                  "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443}]


@pytest.mark.parametrize("cache,reason", [
    (True, "the image pull-through cache's first pull of a tag (ECR User Guide) and the pods' Hugging Face downloads "
           "need it"),
    (False, "the nodes pull the image from ECR Public and the pods reach the Hugging Face Hub through it")])
def test_no_nat_gateway_is_refused_naming_what_needs_it(cache, reason):
    # Amazon ECR User Guide, "Amazon ECR interface VPC endpoints": the first pull through a pull-through cache rule
    # over the interface endpoints needs a NAT gateway route to the internet; later pulls don't.
    from stacks.context import settings_from_context
    from stacks.settings import SettingsError
    from tests.conftest import base_context

    with pytest.raises(SettingsError) as refused:
        settings_from_context(base_context() | {"nat_gateways": 0, "image_pull_through_cache": cache})
    assert str(refused.value) == f"nat_gateways: 0 must be between 1 and the number of AZs (2): {reason}"
