"""cdk_constructs/training_workload.py in the default template: the RayJob waits for its namespace and its pods'
credentials, the job API admits the operator's namespace, and the pods' role trusts their own service account."""

from __future__ import annotations

import pytest

from tests.conftest import UNDER_MUTATION
from tests.infra.test_cluster_software import manifest_of
from tests.infra.test_pod_identity_audit import associations
from tests.infra.test_training_cluster_audit import _logical_id

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


@pytest.mark.parametrize("dependency", ["training namespace", "Ray pods' association", "Pod Identity agent"])
def test_the_rayjob_waits_for_its_namespace_and_its_pods_credentials(template, dependency):
    # Applied before its namespace, the manifest fails; started before the association (served by the agent), the
    # pods get no credentials for the bucket and retry until their first checkpoint fails.
    resources = template.to_json()["Resources"]
    assert _logical_id(resources, dependency) in resources[_logical_id(resources, "RayJob")]["DependsOn"]


def test_the_job_api_admits_the_kuberay_operators_namespace(template):
    policy = manifest_of(template, "NetworkPolicy", "ray-head-job-api")
    [operator] = [p for p in policy["spec"]["ingress"][0]["from"] if "namespaceSelector" in p]
    assert operator["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kuberay-system"}


def test_the_ray_pods_role_is_handed_to_and_trusts_training_ray(template):
    role = template.to_json()["Resources"][associations(template)[("training", "ray")]]
    conditions = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert (conditions["aws:RequestTag/kubernetes-namespace"], conditions["aws:RequestTag/kubernetes-service-account"]) \
        == ("training", "ray")
