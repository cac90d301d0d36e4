"""The AWS managed policies the harness models (tools.seams.managed_policies), action by action against each
policy's default version in the AWS Managed Policy Reference Guide: an action added or dropped there would make
the IAM seam pass a call AWS denies, or refuse one AWS allows."""

from __future__ import annotations

import pytest

from tools.seams.iam import Policy, Request, evaluate
from tools.seams.managed_policies import MANAGED_POLICIES

# Each policy's statements as (actions, resource), from its page in the AWS Managed Policy Reference Guide.
PUBLISHED = {
    "AmazonEKSWorkerNodePolicy": [({
        "ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeRouteTables", "ec2:DescribeSecurityGroups",
        "ec2:DescribeSubnets", "ec2:DescribeVolumes", "ec2:DescribeVolumesModifications", "ec2:DescribeVpcs",
        "eks:DescribeCluster", "eks-auth:AssumeRoleForPodIdentity"}, "*")],
    "AmazonEC2ContainerRegistryPullOnly": [(
        {"ecr:GetAuthorizationToken", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}, "*")],
    "CloudWatchAgentServerPolicy": [
        ({"cloudwatch:PutMetricData", "ec2:DescribeVolumes", "ec2:DescribeTags", "logs:PutLogEvents",
          "logs:PutRetentionPolicy", "logs:DescribeLogStreams", "logs:DescribeLogGroups", "logs:CreateLogStream",
          "logs:CreateLogGroup", "xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules",
          "xray:GetSamplingTargets", "xray:GetSamplingStatisticSummaries"}, "*"),
        ({"ssm:GetParameter"}, "arn:aws:ssm:*:*:parameter/AmazonCloudWatch-*")],
    "AmazonEKS_CNI_Policy": [
        ({"ec2:AssignIpv6Addresses", "ec2:AssignPrivateIpAddresses", "ec2:AttachNetworkInterface",
          "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeInstances", "ec2:DescribeTags",
          "ec2:DescribeNetworkInterfaces", "ec2:DescribeInstanceTypes", "ec2:DescribeSubnets",
          "ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute", "ec2:UnassignPrivateIpAddresses"}, "*"),
        ({"ec2:CreateTags"}, "arn:aws:ec2:*:*:network-interface/*")],
    "AWSLambdaBasicExecutionRole": [({"logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"}, "*")],
    "AWSLambdaVPCAccessExecutionRole": [({
        "logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"}, "*")],
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_modelled_policy_holds_exactly_its_published_statements(name):
    statements = MANAGED_POLICIES[name]["Statement"]
    assert [(set(s["Action"]), s["Resource"]) for s in statements] == PUBLISHED[name]
    assert all(s["Effect"] == "Allow" for s in statements)


@pytest.mark.parametrize("action", ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"])
def test_pull_only_does_not_allow_the_pull_through_caches_import(action):
    # ECR User Guide, "Pull through cache rules": the first pull through a cache rule needs
    # ecr:BatchImportUpstreamImage and ecr:CreateRepository, which AmazonEC2ContainerRegistryPullOnly lacks.
    policy = Policy("AmazonEC2ContainerRegistryPullOnly", MANAGED_POLICIES["AmazonEC2ContainerRegistryPullOnly"])
    request = Request("arn:aws:iam::111122223333:role/node", action,
                      "arn:aws:ecr:us-east-2:111122223333:repository/ecr-public/x")
    assert evaluate([policy], request).allowed is False
