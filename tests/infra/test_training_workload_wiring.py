"""cdk_constructs/training_workload.py's wiring of EKS Pod Identity: the association and the role's trust name the
namespace and service account the Ray pods run as, each in its own field.

EKS Pod Identity gives a pod the role of the association for its (namespace, service account), and tags the session
kubernetes-namespace and kubernetes-service-account (EKS user guide, "Create IAM role with trust policy required by
EKS Pod Identity"): with the two swapped, the association matches no pod and the trust refuses every session, so the
workers cannot write a checkpoint. The Ray pods run as `ray` in `training` (TrainingWorkloadProps' defaults).
"""

from __future__ import annotations

import pytest

from cdk_constructs.training_workload import TrainingWorkloadProps
from tests.conftest import UNDER_MUTATION, only
from tests.infra.test_cluster_software import manifest_of

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def ray_association(template) -> dict:
    # The training workload's association (its role's id is RayRole; the autoscaler has its own).
    return only(template, "AWS::EKS::PodIdentityAssociation",
                lambda r: "RayRole" in r["Properties"]["RoleArn"]["Fn::GetAtt"][0])["Properties"]


def test_the_ray_pods_run_as_the_service_account_the_props_name(template):
    # The pods' side of the match, from the RayJob KubeRay creates them from.
    assert (TrainingWorkloadProps.namespace, TrainingWorkloadProps.service_account) == ("training", "ray")
    job = manifest_of(template, "RayJob")
    assert job["metadata"]["namespace"] == "training"
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["serviceAccountName"] == "ray"


def test_the_pod_identity_association_names_the_pods_namespace_and_service_account(template):
    association = ray_association(template)
    assert (association["Namespace"], association["ServiceAccount"]) == ("training", "ray")


def test_the_ray_roles_trust_names_the_pods_namespace_and_service_account(template):
    association = ray_association(template)
    role = template.to_json()["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    [statement] = role["AssumeRolePolicyDocument"]["Statement"]
    tags = statement["Condition"]["StringEquals"]
    assert tags["aws:RequestTag/kubernetes-namespace"] == "training"
    assert tags["aws:RequestTag/kubernetes-service-account"] == "ray"
