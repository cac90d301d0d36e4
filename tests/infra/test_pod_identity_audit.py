"""cdk_constructs/pod_identity.py: each Pod Identity role is trusted for exactly the service account its association
names, in this cluster and account (EKS user guide, "Create IAM role with trust policy required by EKS Pod Identity":
pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession; EKS tags the session with the cluster, namespace and
service account, which the conditions hold)."""

from __future__ import annotations

import pytest

from tests.conftest import UNDER_MUTATION, resources_of

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")

CLUSTER = "EksFsdpEfa"  # cdk.json's eks_cluster_name
# Where each EKS add-on runs the service account it names in PodIdentityAssociations (the add-on has no namespace
# of its own to give): aws-node in kube-system, the CloudWatch agent in amazon-cloudwatch.
ADDON_NAMESPACES = {"vpc-cni": "kube-system", "amazon-cloudwatch-observability": "amazon-cloudwatch"}


def associations(template) -> dict[tuple[str, str], str]:
    """(namespace, service account) -> the logical id of the role each association hands it."""
    found = {}
    for r in resources_of(template, "AWS::EKS::PodIdentityAssociation").values():
        p = r["Properties"]
        found[(p["Namespace"], p["ServiceAccount"])] = p["RoleArn"]["Fn::GetAtt"][0]
    for r in resources_of(template, "AWS::EKS::Addon").values():
        p = r["Properties"]
        for a in p.get("PodIdentityAssociations", []):
            found[(ADDON_NAMESPACES[p["AddonName"]], a["ServiceAccount"])] = a["RoleArn"]["Fn::GetAtt"][0]
    return found


def test_the_associations_are_the_four_service_accounts_that_call_aws(template):
    assert set(associations(template)) == {("kube-system", "aws-node"), ("kube-system", "cluster-autoscaler"),
                                           ("amazon-cloudwatch", "cloudwatch-agent"), ("training", "ray")}


@pytest.mark.parametrize("namespace,service_account", [
    ("kube-system", "aws-node"), ("kube-system", "cluster-autoscaler"), ("amazon-cloudwatch", "cloudwatch-agent"),
    ("training", "ray")])
def test_each_role_trusts_pod_identity_for_its_own_service_account_only(template, namespace, service_account):
    role = template.to_json()["Resources"][associations(template)[(namespace, service_account)]]
    [statement] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert statement["Condition"] == {"StringEquals": {
        "aws:SourceAccount": {"Ref": "AWS::AccountId"},
        "aws:RequestTag/eks-cluster-name": CLUSTER,
        "aws:RequestTag/kubernetes-namespace": namespace,
        "aws:RequestTag/kubernetes-service-account": service_account,
    }}
