"""The AWS managed policies the stack attaches, as far as the harness's calls reach them.

Each document is the policy's default version as the AWS Managed Policy Reference Guide prints it
(https://docs.aws.amazon.com/aws-managed-policy/latest/reference/<name>.html). A policy listed as None
is attached but not modelled: a call evaluated against a role holding it fails loudly.
"""

from __future__ import annotations


def _allow(actions: list[str], resource="*") -> dict:
    return {"Effect": "Allow", "Action": actions, "Resource": resource}


MANAGED_POLICIES: dict[str, dict | None] = {
    "AmazonEKSWorkerNodePolicy": {"Version": "2012-10-17", "Statement": [_allow([
        "ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeRouteTables", "ec2:DescribeSecurityGroups",
        "ec2:DescribeSubnets", "ec2:DescribeVolumes", "ec2:DescribeVolumesModifications", "ec2:DescribeVpcs",
        "eks:DescribeCluster", "eks-auth:AssumeRoleForPodIdentity"])]},
    "AmazonEC2ContainerRegistryPullOnly": {"Version": "2012-10-17", "Statement": [_allow([
        "ecr:GetAuthorizationToken", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"])]},
    "CloudWatchAgentServerPolicy": {"Version": "2012-10-17", "Statement": [
        _allow(["cloudwatch:PutMetricData", "ec2:DescribeVolumes", "ec2:DescribeTags", "logs:PutLogEvents",
                "logs:PutRetentionPolicy", "logs:DescribeLogStreams", "logs:DescribeLogGroups", "logs:CreateLogStream",
                "logs:CreateLogGroup", "xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules",
                "xray:GetSamplingTargets", "xray:GetSamplingStatisticSummaries"]),
        _allow(["ssm:GetParameter"], "arn:aws:ssm:*:*:parameter/AmazonCloudWatch-*")]},
    "AmazonEKS_CNI_Policy": {"Version": "2012-10-17", "Statement": [
        _allow(["ec2:AssignIpv6Addresses", "ec2:AssignPrivateIpAddresses", "ec2:AttachNetworkInterface",
                "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeInstances", "ec2:DescribeTags",
                "ec2:DescribeNetworkInterfaces", "ec2:DescribeInstanceTypes", "ec2:DescribeSubnets",
                "ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute", "ec2:UnassignPrivateIpAddresses"]),
        _allow(["ec2:CreateTags"], "arn:aws:ec2:*:*:network-interface/*")]},
    "AWSLambdaBasicExecutionRole": {"Version": "2012-10-17", "Statement": [_allow([
        "logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"])]},
    "AWSLambdaVPCAccessExecutionRole": {"Version": "2012-10-17", "Statement": [_allow([
        "logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"])]},
    "AmazonEKSClusterPolicy": None,  # the control plane's own role: no call of ours runs as it
}
