"""The VPC CNI as a managed add-on: NetworkPolicy enforcement on, and its own IAM role.

Two things the self-managed CNI that EKS bootstraps does not do. It enforces Kubernetes
NetworkPolicies only when its network-policy agent is on (enableNetworkPolicy). And it runs on the
node role, so the node role must carry AmazonEKS_CNI_Policy (create, attach, modify and delete
network interfaces), which every pod could take from IMDS. Here aws-node gets the policy through
EKS Pod Identity, and the nodes' role does without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk_constructs.pod_identity import pod_identity_role

ADDON_NAME = "vpc-cni"
SERVICE_ACCOUNT = ("kube-system", "aws-node")


def vpc_cni_configuration(network_policy: bool) -> dict:
    """The add-on's configuration values (its JSON schema: aws eks describe-addon-configuration)."""
    return {"enableNetworkPolicy": "true" if network_policy else "false"}


@dataclass(frozen=True)
class VpcCniProps:
    cluster: eks.Cluster
    cluster_name: str
    network_policy: bool = True


class VpcCni(Construct):
    def __init__(self, scope: Construct, id: str, props: VpcCniProps) -> None:
        super().__init__(scope, id)
        namespace, service_account = SERVICE_ACCOUNT
        self.role = pod_identity_role(
            self, "Role", props.cluster_name, namespace, service_account,
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEKS_CNI_Policy")],
        )
        self.addon = eks.Addon(
            self, "Addon", cluster=props.cluster, addon_name=ADDON_NAME,
            configuration_values=vpc_cni_configuration(props.network_policy),
        )
        cfn = self.addon.node.default_child
        cfn.add_property_override("PodIdentityAssociations", [{"ServiceAccount": service_account, "RoleArn": self.role.role_arn}])
        # Take over the CNI EKS bootstrapped, keeping nothing of its configuration.
        cfn.add_property_override("ResolveConflicts", "OVERWRITE")
        # aws-node fetches its credentials from the Pod Identity agent.
        self.addon.node.add_dependency(props.cluster.eks_pod_identity_agent)
