"""Cluster Autoscaler on the system node: the GPU node group from zero to gpu_node_count and back.

It scales a managed node group through its Auto Scaling group, which EKS tags for discovery
(k8s.io/cluster-autoscaler/enabled and k8s.io/cluster-autoscaler/<cluster>) and with the group's
names (eks:cluster-name, eks:nodegroup-name). The IAM writes are scoped by those last two tags to
the GPU group of this cluster; the reads it needs have no resource-level permissions.

How it sees a GPU node that does not exist yet is in template_node() below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct, IDependable

from cdk_constructs.instance_types import InstanceSpec
from cdk_constructs.node_groups import SYSTEM_NODE_LABELS
from cdk_constructs.pod_identity import pod_identity_role

CHART = "cluster-autoscaler"
REPOSITORY = "https://kubernetes.github.io/autoscaler"
# The newest chart (9.59.0) still ships the 1.35 autoscaler; the autoscaler's minor must match the
# cluster's, so the image is the 1.36 release (tag cluster-autoscaler-1.36.1 of kubernetes/autoscaler).
CHART_VERSION = "9.59.0"
IMAGE_TAG = "v1.36.1"
KUBERNETES_MINOR = "1.36"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"

# Its AWS provider's reads (cloudprovider/aws/README.md, "Full Cluster Autoscaler Features Policy").
READ_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
)
WRITE_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")

# ---------------------------------------------------------------- the template node

# cloudprovider/aws at cluster-autoscaler-1.36.1: the resource tag prefix (aws_manager.go
# extractAllocatableResourcesFromTags) and the label its GPU handling waits on (aws_cloud_provider.go GPULabel).
RESOURCE_TAG_PREFIX = "k8s.io/cluster-autoscaler/node-template/resources/"
GPU_LABEL = "k8s.amazonaws.com/accelerator"
# aws_wrapper.go getManagedNodegroupInfo sets it from DescribeNodegroup's capacityType (ON_DEMAND, SPOT,
# CAPACITY_BLOCK), the label EKS puts on the group's nodes (EKS User Guide, "Managed node group capacity types").
CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
# aws_wrapper.go taintEksTranslator: the EKS API's effects in Kubernetes' words.
EKS_TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def template_node(vcpus: int, memory_mb: int, gpus: int, nodegroup: dict, cluster_name: str, nodegroup_name: str) -> dict:
    """The node the autoscaler imagines for a managed node group with no nodes (aws_manager.go
    buildNodeFromTemplate at cluster-autoscaler-1.36.1), as far as scheduling a pod goes:

    - capacity (= allocatable) from its instance table: cpu, memory, nvidia.com/gpu;
    - labels: generic ones, then every ASG tag `eks:<x>` as label <x> (extractLabelsFromAsg): EKS's own
      `eks:cluster-name` and `eks:nodegroup-name` mark the group as managed, which makes it call
      DescribeNodegroup and add the group's labels, taints (with EKS's effect names translated) and
      every group tag under RESOURCE_TAG_PREFIX as a resource (getManagedNodegroupInfo). EKS copies no
      group tag to the ASG, so a resource such as vpc.amazonaws.com/efa must be a group tag read there.

    `nodegroup` is what DescribeNodegroup returns: {"labels": {...}, "taints": [{key, value, effect}], "tags": {...},
    "capacityType": ...}.
    """
    capacity = {"cpu": str(vcpus), "memory": f"{memory_mb}Mi", "nvidia.com/gpu": str(gpus), "pods": "110"}
    for key, value in nodegroup.get("tags", {}).items():
        if key.startswith(RESOURCE_TAG_PREFIX) and key != RESOURCE_TAG_PREFIX:
            capacity[key.removeprefix(RESOURCE_TAG_PREFIX)] = str(value)
    labels = {"cluster-name": cluster_name, "nodegroup-name": nodegroup_name,
              "eks.amazonaws.com/nodegroup": nodegroup_name, **nodegroup.get("labels", {})}
    if nodegroup.get("capacityType"):  # getManagedNodegroupInfo: the group's capacity type, as EKS labels its nodes
        labels[CAPACITY_TYPE_LABEL] = nodegroup["capacityType"]
    taints = [{"key": t["key"], "value": t["value"], "effect": EKS_TAINT_EFFECTS[t["effect"]]}
              for t in nodegroup.get("taints", [])]
    return {"metadata": {"labels": labels}, "spec": {"taints": taints}, "status": {"allocatable": capacity}}


def _quantity(text: str) -> float:
    """A Kubernetes quantity in base units (the suffixes our pods and template use)."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def unschedulable_reasons(node: dict, pod: dict) -> list[str]:
    """Why the scheduler would not place `pod` (a pod spec) on `node`: the filters the autoscaler runs in
    its simulation that our pods exercise (NodeResourcesFit, NodeAffinity's nodeSelector, TaintToleration)."""
    reasons = []
    allocatable = node["status"]["allocatable"]
    for container in pod.get("containers", []):
        for resource, amount in (container.get("resources", {}).get("requests") or {}).items():
            have = allocatable.get(resource)
            if have is None or _quantity(have) < _quantity(str(amount)):
                reasons.append(f"{resource}: requests {amount}, the template node offers {have or 'none'}")
    labels = node["metadata"]["labels"]
    for key, value in (pod.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            reasons.append(f"nodeSelector {key}={value}: the template node has {key}={labels.get(key)}")
    for taint in node["spec"]["taints"]:
        if taint["effect"] == "PreferNoSchedule":
            continue
        if not any(_tolerates(t, taint) for t in pod.get("tolerations") or []):
            reasons.append(f"taint {taint['key']}={taint['value']}:{taint['effect']} is not tolerated")
    return reasons


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") not in (None, "", taint["effect"]):
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, "", taint["key"])
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint["value"]


# ---------------------------------------------------------------- the chart


def autoscaler_values(cluster_name: str, region: str, scale_down_delay_minutes: int) -> dict:
    delay = f"{scale_down_delay_minutes}m"
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        # Discovers ASGs tagged k8s.io/cluster-autoscaler/enabled and k8s.io/cluster-autoscaler/<cluster>.
        "autoDiscovery": {"clusterName": cluster_name},
        "image": {"tag": IMAGE_TAG},
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "nodeSelector": dict(SYSTEM_NODE_LABELS),
        "extraArgs": {
            # A GPU node without a Ray worker goes after the delay, also right after a short job.
            "scale-down-unneeded-time": delay,
            "scale-down-delay-after-add": delay,
            # The workers' memory-backed /dev/shm and model cache are emptyDirs: without this a node
            # that held them would be kept.
            "skip-nodes-with-local-storage": "false",
            "expander": "least-waste",
        },
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containerSecurityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                     "readOnlyRootFilesystem": True},
    }


def _bare_nodegroup_name(nodegroup: eks.Nodegroup) -> str:
    """The name EKS tags the group's ASG with (eks:nodegroup-name). `nodegroup_name` is the resource's
    Ref, which CloudFormation resolves to `<cluster>/<nodegroup>` for AWS::EKS::Nodegroup (aws-cdk issue
    22442; fixed only behind the feature flag @aws-cdk/aws-eks:nodegroupNameAttribute): a tag condition
    on it never matches and every scale-up is denied. GetAtt NodegroupName is the bare name."""
    return nodegroup.node.default_child.attr_nodegroup_name


@dataclass(frozen=True)
class ClusterAutoscalerProps:
    cluster: eks.Cluster
    cluster_name: str
    """Known at synth: the discovery tags, the Pod Identity trust and the IAM conditions name it."""
    region: str
    gpu_nodegroup: eks.Nodegroup
    """The one group it may resize."""
    gpu_instance: InstanceSpec
    gpu_nodegroup_described: dict
    """What DescribeNodegroup returns for the GPU group (labels, taints, tags): see template_node()."""
    pending_pod: dict
    """The pod spec whose pending copies must start GPU nodes: the Ray worker."""
    kubernetes_version: str = KUBERNETES_MINOR
    scale_down_delay_minutes: int = 5
    requires: Sequence[IDependable] = ()
    """The system node group, where it runs."""


class ClusterAutoscaler(Construct):
    def __init__(self, scope: Construct, id: str, props: ClusterAutoscalerProps) -> None:
        super().__init__(scope, id)
        if props.kubernetes_version != KUBERNETES_MINOR:
            raise ValueError(f"cluster autoscaler: {IMAGE_TAG} is the release for Kubernetes {KUBERNETES_MINOR}, "
                             f"the cluster runs {props.kubernetes_version}")
        if not 1 <= props.scale_down_delay_minutes <= 1440:
            raise ValueError(f"cluster autoscaler: scale-down delay {props.scale_down_delay_minutes} min is not 1 to 1440")
        # From zero nodes it starts GPU nodes only for a pod its template node can take; a mismatch would
        # leave the workers pending for ever, with nothing failing at deploy.
        spec = props.gpu_instance
        node = template_node(spec.vcpus, spec.memory_gib * 1024, spec.gpus, props.gpu_nodegroup_described,
                             props.cluster_name, "gpu")
        reasons = unschedulable_reasons(node, props.pending_pod)
        if reasons:
            raise ValueError("GPU node group: Cluster Autoscaler's template node cannot take the Ray worker pod: "
                             + "; ".join(reasons))
        self.role = pod_identity_role(self, "Role", props.cluster_name, NAMESPACE, SERVICE_ACCOUNT)
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=list(READ_ACTIONS), resources=["*"]))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            actions=["eks:DescribeNodegroup"], resources=[props.gpu_nodegroup.nodegroup_arn]))
        self.role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(WRITE_ACTIONS), resources=["*"],
            conditions={"StringEquals": {"aws:ResourceTag/eks:cluster-name": props.cluster_name,
                                         "aws:ResourceTag/eks:nodegroup-name": _bare_nodegroup_name(props.gpu_nodegroup)}}))
        NagSuppressions.add_resource_suppressions(self.role, [NagPackSuppression(
            id="AwsSolutions-IAM5",
            reason="Auto Scaling and EC2 describe calls have no resource-level permissions; the two writes are "
                   "limited by the ASG's eks:cluster-name and eks:nodegroup-name tags to this cluster's GPU group.",
            applies_to=["Resource::*"])], apply_to_children=True)
        self.pod_identity = eks.CfnPodIdentityAssociation(
            self, "PodIdentity", cluster_name=props.cluster.cluster_name, namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT, role_arn=self.role.role_arn)
        self.chart = eks.HelmChart(
            self, "Chart", cluster=props.cluster, chart=CHART, repository=REPOSITORY, version=CHART_VERSION,
            release="cluster-autoscaler", namespace=NAMESPACE,
            values=autoscaler_values(props.cluster_name, props.region, props.scale_down_delay_minutes))
        # Credentials come from the association when its pod starts: both must exist first.
        self.chart.node.add_dependency(self.pod_identity, props.cluster.eks_pod_identity_agent, *props.requires)
