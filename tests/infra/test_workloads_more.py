"""Each workload's AWS calls (tools.seams.workloads), more cases on small templates: each call made as the role of
the function that makes it, and Pod Identity's request context as a trust policy's conditions read it."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_workloads import autoscaler_template, denied
from tools.seams import workloads as w
from tools.seams.cfn import Resolver


def _role(name: str) -> dict:
    return {"Type": "AWS::IAM::Role", "Properties": {"RoleName": name, "AssumeRolePolicyDocument": {"Statement": []}}}


def _kubectl_provider() -> dict:
    """aws-cdk-lib's kubectl provider: a framework function invoking the handler, each with its own role."""
    return {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
        "FrameworkRole": _role("framework"), "HandlerRole": _role("handler"),
        "Handler": {"Type": "AWS::Lambda::Function", "Properties": {"Role": {"Fn::GetAtt": ["HandlerRole", "Arn"]}}},
        "Framework": {"Type": "AWS::Lambda::Function", "Properties": {
            "Role": {"Fn::GetAtt": ["FrameworkRole", "Arn"]},
            "Environment": {"Variables": {"USER_ON_EVENT_FUNCTION_ARN": {"Fn::GetAtt": ["Handler", "Arn"]}}}}}}}


def test_the_framework_invokes_the_handler_and_the_handler_describes_the_cluster_each_as_its_own_role():
    calls = w.kubectl_handler_calls(Resolver(_kubectl_provider()))
    assert [(c.request.principal.rsplit("/", 1)[1], c.request.action) for c in calls] == [
        ("framework", "lambda:InvokeFunction"), ("handler", "eks:DescribeCluster")]


def _pod_identity_trusting(conditions: dict) -> dict:
    t = autoscaler_template({"Ref": "Gpu"})
    t["Resources"]["Role"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"] = conditions
    return t


THIS_CLUSTER = {"Fn::GetAtt": ["Cluster", "Arn"]}
OTHER_CLUSTER = "arn:aws:eks:us-east-2:111122223333:cluster/other"


@pytest.mark.parametrize(("conditions", "denials"), [
    # EKS User Guide, Pod Identity: the agent assumes the role with aws:SourceAccount and aws:SourceArn (the cluster)
    # and the session tags kubernetes-namespace / kubernetes-service-account of the pod's service account
    ({"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}, "ArnEquals": {"aws:SourceArn": THIS_CLUSTER}}, 0),
    ({"ArnEquals": {"aws:SourceArn": OTHER_CLUSTER}}, 2),
    ({"StringEquals": {"aws:RequestTag/kubernetes-namespace": "kube-system",
                       "aws:RequestTag/kubernetes-service-account": "cluster-autoscaler"}}, 0),
    ({"StringEquals": {"aws:RequestTag/kubernetes-namespace": "cluster-autoscaler"}}, 2),
    ({"StringEquals": {"aws:RequestTag/eks-cluster-arn": THIS_CLUSTER, "aws:RequestTag/eks-cluster-name": "demo"}}, 0),
])
def test_a_trust_policy_is_judged_on_the_cluster_and_service_account_pod_identity_names(conditions, denials):
    assert len(denied(_pod_identity_trusting(conditions), w.pod_identity_calls)) == denials


@pytest.mark.parametrize(("image", "repository"), [
    # a private ECR host is <account>.dkr.ecr.<region>.amazonaws.com: six dot-separated parts at least
    ("111122223333.dkr.ecr.us-east-2.amazonaws.com/train:v1", "arn:aws:ecr:us-east-2:111122223333:repository/train"),
    ("mirror.dkr.ecr.example/train:v1", None), ("mirror.dkr.ecr/train:v1", None),
])
def test_only_a_full_private_ecr_host_names_a_repository(image, repository):
    assert w.ecr_repository_arn(image) == repository
