"""IAM roles for EKS Pod Identity, trusted by one service account of one cluster only."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct


def pod_identity_trust(account: str, cluster_name: str, namespace: str, service_account: str) -> iam.PrincipalBase:
    """pods.eks.amazonaws.com may assume the role (and tag the session) only for this service account.

    EKS Pod Identity tags each session with the cluster, namespace and service account (EKS user guide,
    "Create IAM role with trust policy required by EKS Pod Identity"); without these conditions any
    Pod Identity association in the account could use the role.
    """
    # SessionTagsPrincipal puts sts:TagSession in the same statement as sts:AssumeRole.
    return iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")).with_conditions({
        "StringEquals": {
            "aws:SourceAccount": account,
            "aws:RequestTag/eks-cluster-name": cluster_name,
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account,
        },
    })


def pod_identity_role(scope: Construct, id: str, cluster_name: str, namespace: str, service_account: str,
                      managed_policies: list[iam.IManagedPolicy] | None = None) -> iam.Role:
    role = iam.Role(
        scope, id,
        assumed_by=pod_identity_trust(Stack.of(scope).account, cluster_name, namespace, service_account),
        managed_policies=managed_policies,
        description=f"EKS Pod Identity: {namespace}/{service_account} on {cluster_name}",
    )
    return role
