"""cdk_constructs/kuberay.py and device_plugins.py: where each chart goes, and the KubeRay operator installed with
its CRDs and webhook serving before the RayJob is applied."""

from __future__ import annotations

import json

import pytest

from cdk_constructs import device_plugins
from tests.conftest import UNDER_MUTATION
from tests.infra.test_cluster_software import helm_chart, manifest_of

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def test_the_operator_chart_waits_in_its_own_namespace_on_the_system_node(template):
    chart = helm_chart(template, "kuberay-operator")
    assert (chart["Namespace"], chart["CreateNamespace"]) == ("kuberay-system", True)
    # wait: the CRDs and the webhook serve before CloudFormation applies the RayJob (which depends on the chart).
    assert chart["Wait"] is True and chart["Timeout"] == "600s"
    values = chart["Values"] if isinstance(chart["Values"], dict) else json.loads(chart["Values"])
    assert values == {"nodeSelector": {"role": "system"}}


def test_the_job_api_admits_the_operator_from_the_namespace_it_runs_in(template):
    # The head's job API NetworkPolicy names the operator's namespace: the chart's, or KubeRay cannot poll the job.
    namespace = helm_chart(template, "kuberay-operator")["Namespace"]
    policy = manifest_of(template, "NetworkPolicy", "ray-head-job-api")
    [operator] = [p for p in policy["spec"]["ingress"][0]["from"] if "namespaceSelector" in p]
    assert operator["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}


@pytest.mark.parametrize("chart", [device_plugins.NVIDIA_CHART, device_plugins.EFA_CHART])
def test_each_device_plugin_runs_in_kube_system(template, chart):
    assert helm_chart(template, chart)["Namespace"] == "kube-system"
