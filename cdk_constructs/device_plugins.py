"""NVIDIA and EFA device plugins: make GPUs and EFA interfaces schedulable resources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from cdk_constructs.node_groups import GPU_NODE_LABELS, GPU_TAINT

NVIDIA_CHART = "nvidia-device-plugin"
NVIDIA_REPOSITORY = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_VERSION = "0.20.0"

EFA_CHART = "aws-efa-k8s-device-plugin"
EFA_REPOSITORY = "https://aws.github.io/eks-charts"
# The version whose values (and instance allowlist) tests/data/eks-charts holds.
EFA_VERSION = "v0.5.30"

GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": GPU_NODE_LABELS["nvidia.com/gpu.present"]}


def gpu_tolerations(tainted: bool) -> list[dict]:
    if not tainted:
        return []
    return [{"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"], "effect": GPU_TAINT["effect"]}]


def nvidia_values(tainted: bool) -> dict:
    return {"nodeSelector": dict(GPU_NODE_SELECTOR), "tolerations": gpu_tolerations(tainted)}


def efa_values(gpu_instance_type: str, tainted: bool) -> dict:
    """The chart's DaemonSet runs only on instance types in supportedInstanceLabels.

    Helm replaces lists whole, so this names exactly our GPU type: the plugin then runs on
    our GPU nodes whatever the pinned chart's own allowlist holds.
    """
    return {
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"], "values": [gpu_instance_type]},
        "nodeSelector": dict(GPU_NODE_SELECTOR),
        "tolerations": gpu_tolerations(tainted),
    }


@dataclass(frozen=True)
class DevicePluginsProps:
    cluster: eks.ICluster
    gpu_instance_type: str
    gpu_taint: bool = True
    requires: Sequence[IDependable] = ()
    """The GPU node group: the charts' DaemonSets have nowhere to run before it."""


class DevicePlugins(Construct):
    def __init__(self, scope: Construct, id: str, props: DevicePluginsProps) -> None:
        super().__init__(scope, id)
        self.nvidia = eks.HelmChart(
            self, "Nvidia", cluster=props.cluster, chart=NVIDIA_CHART, repository=NVIDIA_REPOSITORY,
            version=NVIDIA_VERSION, release="nvidia-device-plugin", namespace="kube-system",
            values=nvidia_values(props.gpu_taint),
        )
        self.efa = eks.HelmChart(
            self, "Efa", cluster=props.cluster, chart=EFA_CHART, repository=EFA_REPOSITORY,
            version=EFA_VERSION, release="aws-efa-k8s-device-plugin", namespace="kube-system",
            values=efa_values(props.gpu_instance_type, props.gpu_taint),
        )
        if props.requires:
            self.node.add_dependency(*props.requires)
