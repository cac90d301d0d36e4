"""The KubeRay operator (and its CRDs), on the system node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from cdk_constructs.node_groups import SYSTEM_NODE_LABELS

KUBERAY_CHART = "kuberay-operator"
KUBERAY_REPOSITORY = "https://ray-project.github.io/kuberay-helm/"
# 1.7.0: the CRDs in tests/data/kuberay-v1.7.0 validate our RayCluster and RayJob.
KUBERAY_VERSION = "1.7.0"
KUBERAY_NAMESPACE = "kuberay-system"


def kuberay_values() -> dict:
    return {"nodeSelector": dict(SYSTEM_NODE_LABELS)}


@dataclass(frozen=True)
class KubeRayOperatorProps:
    cluster: eks.ICluster
    requires: Sequence[IDependable] = ()
    """The system node group, where the operator runs (wait=True would otherwise time out)."""


class KubeRayOperator(Construct):
    namespace = KUBERAY_NAMESPACE

    def __init__(self, scope: Construct, id: str, props: KubeRayOperatorProps) -> None:
        super().__init__(scope, id)
        # wait: the CRDs and webhook must be serving before a RayCluster is applied.
        self.chart = eks.HelmChart(
            self, "Chart", cluster=props.cluster, chart=KUBERAY_CHART, repository=KUBERAY_REPOSITORY,
            version=KUBERAY_VERSION, release="kuberay-operator", namespace=KUBERAY_NAMESPACE,
            create_namespace=True, wait=True, timeout=Duration.minutes(10), values=kuberay_values(),
        )
        if props.requires:
            self.node.add_dependency(*props.requires)
