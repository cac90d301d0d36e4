"""cdk-nag suppressions (AwsSolutions and our EksV2 pack) and CDK validation acknowledgements, each naming its rule and why."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_eks_v2 as eks
from cdk_nag import NagPackSuppression, NagSuppressions

# AWS-managed policies that EKS and the kubectl handler require by design, each on the roles named.
_REQUIRED_MANAGED_POLICIES = [
    # the EKS cluster role
    "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy",
    # the node roles: join the cluster and serve Pod Identity; pull images (not list or describe them)
    "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
    # the VPC CNI's own Pod Identity role (aws-node), not the nodes'
    "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKS_CNI_Policy",
    # the CloudWatch agent's own Pod Identity role (amazon-cloudwatch-observability): logs and metrics out
    "Policy::arn:<AWS::Partition>:iam::aws:policy/CloudWatchAgentServerPolicy",
    # the kubectl handler and custom-resource Lambdas: their logs and their ENIs in the VPC
    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
]


def add_nag_suppressions(stack: Stack, cluster: eks.Cluster, endpoint_cidrs_unset: bool) -> None:
    NagSuppressions.add_stack_suppressions(
        stack,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM4",
                reason="EKS requires these AWS-managed policies: the cluster role (AmazonEKSClusterPolicy), the node "
                "roles (AmazonEKSWorkerNodePolicy, AmazonEC2ContainerRegistryPullOnly), the VPC CNI's Pod Identity role "
                "(AmazonEKS_CNI_Policy), the CloudWatch agent's Pod Identity role (CloudWatchAgentServerPolicy) and the "
                "Lambda roles (basic execution, VPC access); no other managed policy.",
                applies_to=_REQUIRED_MANAGED_POLICIES,
            ),
        ],
    )
    # The kubectl handler and its provider framework are aws-cdk-lib's code, not ours.
    NagSuppressions.add_resource_suppressions(
        cluster.kubectl_provider,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="aws-cdk-lib's provider framework invokes its own handler's versions (<arn>:*).",
            ),
            NagPackSuppression(
                id="AwsSolutions-L1",
                reason="The kubectl handler's runtime is pinned by aws-cdk-lib to match its kubectl layer.",
            ),
        ],
        apply_to_children=True,
    )
    if endpoint_cidrs_unset:
        # Our own rule (stacks/eks_nag.py); set CIDRs, 0.0.0.0/0 included, are reported as they are.
        NagSuppressions.add_resource_suppressions(cluster.node.default_child, [NagPackSuppression(
            id="EksV2-EKS1",
            reason="endpoint_public_cidrs is unset: `make deploy` and `make diff` set it to the deployer's address "
            "(/32); a plain `cdk deploy` leaves 0.0.0.0/0, and synth warns (eks-fsdp-efa:open-endpoint).",
        )])
    # CDK's built-in CloudFormation validation: the AZs are fixed on purpose.
    Validations.of(stack).acknowledge(
        Acknowledgment(
            id="CloudFormation-Validate::W3010",
            reason="AZs come from settings so synth needs no account lookup, and the GPU AZ is the one "
            "where capacity was checked (make preflight).",
        )
    )
