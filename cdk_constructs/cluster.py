"""The EKS control plane: native AWS::EKS::Cluster (aws_eks_v2) with a kubectl handler."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from aws_cdk import Annotations, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

# Kubernetes minor -> (module, class) of the kubectl Lambda layer built for it.
KUBECTL_LAYERS = {"1.36": ("aws_cdk.lambda_layer_kubectl_v36", "KubectlV36Layer")}

CONTROL_PLANE_LOGS = (
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
)


@dataclass(frozen=True)
class EksClusterProps:
    vpc: ec2.IVpc
    cluster_name: str
    """Known at synth, so that the control-plane log group can exist (with its retention) before EKS writes to it."""
    kubernetes_version: str = "1.36"
    endpoint_access: str = "public_and_private"
    endpoint_public_cidrs: tuple[str, ...] = ()
    """Who may reach the public endpoint; none given leaves it open to 0.0.0.0/0 (with a warning)."""
    admin_principal_arn: str | None = None
    """An IAM role or user ARN (see stacks.validation.access_entry_principal)."""
    admin_principal_note: str | None = None
    """Shown as a synth warning, e.g. that an STS session ARN was converted to its role's."""
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    log_encryption_key: kms.IKey | None = None
    tags: dict[str, str] = field(default_factory=dict)


def endpoint_access(mode: str, public_cidrs: tuple[str, ...]) -> eks.EndpointAccess:
    if mode == "private":
        return eks.EndpointAccess.PRIVATE
    base = eks.EndpointAccess.PUBLIC if mode == "public" else eks.EndpointAccess.PUBLIC_AND_PRIVATE
    return base.only_from(*public_cidrs) if public_cidrs else base


def kubectl_layer(scope: Construct, version: str):
    """The kubectl layer built for this Kubernetes minor: nothing else checks that they match
    before kubectl fails at deploy (aws-cdk issue 24580)."""
    if version not in KUBECTL_LAYERS:
        raise ValueError(f"kubectl layer: no layer for Kubernetes {version}; have {', '.join(KUBECTL_LAYERS)}")
    module, name = KUBECTL_LAYERS[version]
    return getattr(importlib.import_module(module), name)(scope, "KubectlLayer")


# What the kubectl handler's role keeps: Lambda's logs and its network interfaces in the VPC.
KUBECTL_HANDLER_POLICIES = ("service-role/AWSLambdaBasicExecutionRole", "service-role/AWSLambdaVPCAccessExecutionRole")


def trim_kubectl_handler_role(cluster: eks.Cluster) -> None:
    """aws-cdk-lib gives the kubectl handler ECR read on every repository of the account (and ECR
    Public read) so that Helm can pull charts stored as OCI images. Our charts come from HTTPS
    repositories: the handler keeps only what it runs on (its access entry gives it the cluster)."""
    from aws_cdk import Fn

    role = cluster.kubectl_provider.role.node.default_child
    # On the resource's own property (not an override), so that cdk-nag reads what CloudFormation gets.
    role.managed_policy_arns = [
        Fn.join("", ["arn:", Fn.ref("AWS::Partition"), f":iam::aws:policy/{name}"]) for name in KUBECTL_HANDLER_POLICIES]
    cluster.kubectl_provider.node.find_child("Handler").node.try_remove_child("HasEcrPublic")


class EksCluster(Construct):
    """EKS with envelope-encrypted secrets, control-plane logs and no default capacity."""

    def __init__(self, scope: Construct, id: str, props: EksClusterProps) -> None:
        super().__init__(scope, id)
        # EKS writes control-plane logs to this group by name; made first, it carries a retention and
        # goes with the stack instead of growing forever.
        self.control_plane_logs = logs.LogGroup(
            self, "ControlPlaneLogs", log_group_name=f"/aws/eks/{props.cluster_name}/cluster",
            retention=props.log_retention, encryption_key=props.log_encryption_key, removal_policy=RemovalPolicy.DESTROY,
        )
        self.secrets_key = kms.Key(
            self, "SecretsKey", enable_key_rotation=True,
            description="Envelope encryption of Kubernetes secrets",
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            version=eks.KubernetesVersion.of(props.kubernetes_version),
            cluster_name=props.cluster_name,
            vpc=props.vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # Off: otherwise the deploying role gets a cluster-admin entry that the template does not
            # show. Access is explicit access entries only (the kubectl handler's, admin_principal_arn).
            bootstrap_cluster_creator_admin_permissions=False,
            endpoint_access=endpoint_access(props.endpoint_access, props.endpoint_public_cidrs),
            secrets_encryption_key=self.secrets_key,
            cluster_logging=list(CONTROL_PLANE_LOGS),
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, props.kubernetes_version),
            ),
            tags=props.tags or None,
        )
        self.cluster.node.add_dependency(self.control_plane_logs)
        trim_kubectl_handler_role(self.cluster)
        if props.endpoint_access != "private" and (not props.endpoint_public_cidrs or "0.0.0.0/0" in props.endpoint_public_cidrs):
            Annotations.of(self).add_warning_v2(
                "eks-fsdp-efa:open-endpoint",
                "The EKS API endpoint is reachable from 0.0.0.0/0 (authenticated by IAM); `make deploy` "
                "narrows it to your address, or set endpoint_public_cidrs to your own ranges.",
            )
        if not props.admin_principal_arn:
            Annotations.of(self).add_warning_v2(
                "eks-fsdp-efa:no-admin",
                "No person has access to the cluster (creator admin is off): `make deploy` adds your identity, "
                "or set admin_principal_arn.",
            )
        if props.admin_principal_note:
            Annotations.of(self).add_warning_v2("eks-fsdp-efa:admin-principal", props.admin_principal_note)
        if props.admin_principal_arn:
            eks.AccessEntry(
                self,
                "AdminAccess",
                cluster=self.cluster,
                principal=props.admin_principal_arn,
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
