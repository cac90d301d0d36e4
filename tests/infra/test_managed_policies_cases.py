"""The AWS managed policies as the harness models them (tools.seams.managed_policies), judged on the calls the
stack's workloads make: each row an action and resource of the policy's published document (AWS Managed Policy
Reference Guide, the policy's page), or one it does not hold, which the stack grants itself."""

from __future__ import annotations

import pytest

from tools.seams.iam import Policy, Request, evaluate
from tools.seams.managed_policies import MANAGED_POLICIES

ROLE = "arn:aws:iam::111122223333:role/node"
LOG_GROUP = "arn:aws:logs:us-east-2:111122223333:log-group:/aws/containerinsights/demo/application"


@pytest.mark.parametrize("policy, action, resource, allowed", [
    ("AmazonEC2ContainerRegistryPullOnly", "ecr:GetAuthorizationToken", "*", True),
    ("AmazonEC2ContainerRegistryPullOnly", "ecr:BatchGetImage", "arn:aws:ecr:us-east-2:111122223333:repository/r", True),
    ("AmazonEC2ContainerRegistryPullOnly", "ecr:GetDownloadUrlForLayer", "arn:aws:ecr:us-east-2:111122223333:repository/r", True),
    # the cache's first pull creates the repository: not a pull right, the stack grants it to the nodes
    ("AmazonEC2ContainerRegistryPullOnly", "ecr:CreateRepository", "arn:aws:ecr:us-east-2:111122223333:repository/r", False),
    ("AmazonEC2ContainerRegistryPullOnly", "ecr:PutImage", "arn:aws:ecr:us-east-2:111122223333:repository/r", False),
    ("AmazonEKSWorkerNodePolicy", "eks-auth:AssumeRoleForPodIdentity", "arn:aws:eks:us-east-2:111122223333:cluster/demo", True),
    ("AmazonEKSWorkerNodePolicy", "eks:DescribeCluster", "arn:aws:eks:us-east-2:111122223333:cluster/demo", True),
    ("AmazonEKSWorkerNodePolicy", "ec2:DescribeInstances", "*", True),
    ("AmazonEKSWorkerNodePolicy", "ecr:BatchGetImage", "arn:aws:ecr:us-east-2:111122223333:repository/r", False),
    ("CloudWatchAgentServerPolicy", "cloudwatch:PutMetricData", "*", True),
    ("CloudWatchAgentServerPolicy", "logs:PutLogEvents", f"{LOG_GROUP}:log-stream:s", True),
    ("CloudWatchAgentServerPolicy", "logs:CreateLogStream", LOG_GROUP, True),
    ("CloudWatchAgentServerPolicy", "logs:DescribeLogStreams", LOG_GROUP, True),
    ("CloudWatchAgentServerPolicy", "ec2:DescribeTags", "*", True),
    ("CloudWatchAgentServerPolicy", "logs:DeleteLogGroup", LOG_GROUP, False),
    # its SSM read is limited to the agent's own configuration parameters
    ("CloudWatchAgentServerPolicy", "ssm:GetParameter", "arn:aws:ssm:us-east-2:111122223333:parameter/AmazonCloudWatch-linux", True),
    ("CloudWatchAgentServerPolicy", "ssm:GetParameter", "arn:aws:ssm:us-east-2:111122223333:parameter/db-password", False),
    ("AmazonEKS_CNI_Policy", "ec2:AssignPrivateIpAddresses", "*", True),
    ("AmazonEKS_CNI_Policy", "ec2:CreateNetworkInterface", "*", True),
    ("AmazonEKS_CNI_Policy", "ec2:CreateTags", "arn:aws:ec2:us-east-2:111122223333:network-interface/eni-1", True),
    ("AmazonEKS_CNI_Policy", "ec2:CreateTags", "arn:aws:ec2:us-east-2:111122223333:instance/i-1", False),
    ("AWSLambdaBasicExecutionRole", "logs:PutLogEvents", "*", True),
    ("AWSLambdaBasicExecutionRole", "logs:CreateLogGroup", "*", True),
    ("AWSLambdaBasicExecutionRole", "ec2:CreateNetworkInterface", "*", False),
    ("AWSLambdaVPCAccessExecutionRole", "ec2:CreateNetworkInterface", "*", True),
    ("AWSLambdaVPCAccessExecutionRole", "ec2:DeleteNetworkInterface", "*", True),
])
def test_a_managed_policy_allows_what_its_published_document_does(policy, action, resource, allowed):
    decision = evaluate([Policy(policy, MANAGED_POLICIES[policy])], Request(ROLE, action, resource))
    assert decision.allowed is allowed


def test_the_control_planes_policy_is_attached_but_not_modelled():
    # No call of the harness runs as the cluster's own role: judging one must fail loudly (workloads.role_policies).
    assert MANAGED_POLICIES["AmazonEKSClusterPolicy"] is None
