"""Container logs and Container Insights (with NVIDIA GPU and EFA metrics) that outlive the pods.

The EKS add-on amazon-cloudwatch-observability runs the CloudWatch agent and Fluent Bit as DaemonSets
that tolerate every taint (its chart's default tolerations: operator Exists), so they run on the GPU
nodes too, with the DCGM exporter for GPU metrics. Fluent Bit ships every container's stdout to
/aws/containerinsights/<cluster>/application (head, workers and the submitter included); the agent
writes metrics as embedded-metric logs to .../performance. Both create their groups only when
missing, so the stack makes them first, with the stack's retention and logs key, and deletes them
with the stack. The run's record (metrics.jsonl, summary, checkpoints) stays in S3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aws_cdk import RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IDependable

from cdk_constructs.pod_identity import pod_identity_role

ADDON_NAME = "amazon-cloudwatch-observability"
# Pod Identity for the add-on needs version 3.1.0 or later (CloudWatch user guide, "Quick start with the
# Amazon CloudWatch Observability EKS add-on"); EKS installs its default version for the cluster's Kubernetes.
SERVICE_ACCOUNT = ("amazon-cloudwatch", "cloudwatch-agent")
# The groups Fluent Bit (the chart's log_group_name settings) and the agent write to.
LOG_GROUP_KINDS = ("application", "dataplane", "host", "performance")


def log_group_names(cluster_name: str) -> list[str]:
    return [f"/aws/containerinsights/{cluster_name}/{kind}" for kind in LOG_GROUP_KINDS]


def observability_configuration() -> dict:
    """The add-on's configuration values: container logs on, and Container Insights' enhanced metrics with
    the accelerated-compute ones (NVIDIA GPU, EFA) said explicitly rather than left to the defaults.

    An agent configuration without `application_signals` also keeps Application Signals from monitoring
    every service (its chart's manager.modify-auto-monitor-config), which would inject its Python
    instrumentation into the Ray pods."""
    return {
        "containerLogs": {"enabled": True},
        "agent": {"config": {"logs": {"metrics_collected": {"kubernetes": {
            "enhanced_container_insights": True, "accelerated_compute_metrics": True}}}}},
    }


@dataclass(frozen=True)
class ObservabilityProps:
    cluster: eks.Cluster
    cluster_name: str
    """Known at synth: the log groups are named after it."""
    retention: logs.RetentionDays
    encryption_key: kms.IKey
    requires: Sequence[IDependable] = ()
    """The system node group: the add-on's operator runs there."""


class Observability(Construct):
    def __init__(self, scope: Construct, id: str, props: ObservabilityProps) -> None:
        super().__init__(scope, id)
        self.log_groups = [
            logs.LogGroup(self, name.rsplit("/", 1)[-1].capitalize(), log_group_name=name, retention=props.retention,
                          encryption_key=props.encryption_key, removal_policy=RemovalPolicy.DESTROY)
            for name in log_group_names(props.cluster_name)]
        namespace, service_account = SERVICE_ACCOUNT
        self.role = pod_identity_role(
            self, "Role", props.cluster_name, namespace, service_account,
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("CloudWatchAgentServerPolicy")])
        self.addon = eks.Addon(self, "Addon", cluster=props.cluster, addon_name=ADDON_NAME,
                               configuration_values=observability_configuration())
        self.addon.node.default_child.add_property_override(
            "PodIdentityAssociations", [{"ServiceAccount": service_account, "RoleArn": self.role.role_arn}])
        # Its groups exist (with retention) before anything writes to them; credentials come from the agent.
        self.addon.node.add_dependency(*self.log_groups, props.cluster.eks_pod_identity_agent, *props.requires)
