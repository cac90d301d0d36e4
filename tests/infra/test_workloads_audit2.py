"""The AWS calls the seam harness makes for the nodes and the kubectl provider (tools.seams.workloads), each
checked against the documented call and resource."""

from __future__ import annotations

import pytest

from tools.seams import workloads as w
from tools.seams.cfn import Resolver

ROLE = {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": []}}}


def _template(**resources) -> Resolver:
    return Resolver({"Resources": {"Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
                                   **resources}}, "us-east-2")


@pytest.mark.parametrize("image", [
    # six dot-separated labels but not <account>.dkr.ecr.<region>.amazonaws.com: not ECR, no IAM call
    "registry.internal.example.co.uk.corp/ray/train:v1", "111122223333.docker.ecr.us-east-2.amazonaws.com/ray:v1",
])
def test_a_registry_that_is_not_ecr_has_no_repository_arn(image):
    assert w.ecr_repository_arn(image) is None


def test_a_node_pulls_a_private_ecr_image_with_a_token_then_the_manifest_and_layers():
    # Amazon ECR User Guide, "Private repository policies" / kubelet's ECR credential provider:
    # ecr:GetAuthorizationToken on "*", then ecr:BatchGetImage and ecr:GetDownloadUrlForLayer on the repository.
    r = _template(NodeRole=ROLE, Gpu={"Type": "AWS::EKS::Nodegroup", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "NodeRole": {"Fn::GetAtt": ["NodeRole", "Arn"]}}})
    image = "111122223333.dkr.ecr.us-east-2.amazonaws.com/ray/train:v1"
    calls = w.node_calls(r, [image, "docker.io/rayproject/ray:2.58.0"])
    repository = "arn:aws:ecr:us-east-2:111122223333:repository/ray/train"
    assert [(c.request.action, c.request.resource) for c in calls] == [
        ("eks-auth:AssumeRoleForPodIdentity", "arn:aws:eks:us-east-2:111122223333:cluster/demo"),
        ("ecr:GetAuthorizationToken", "*"), ("ecr:BatchGetImage", repository), ("ecr:GetDownloadUrlForLayer", repository)]
    assert {c.request.principal for c in calls} == {"arn:aws:iam::111122223333:role/<AWS::IAM::Role generated-name NodeRole>"}


def test_the_kubectl_provider_invokes_its_handler_which_describes_the_cluster():
    # aws-cdk-lib's provider framework invokes USER_ON_EVENT_FUNCTION_ARN as its own role; the handler runs
    # `aws eks update-kubeconfig` (eks:DescribeCluster) as the handler's role.
    def role(name):  # a role with one inline policy, to tell which role's policies judge each call
        return {**ROLE, "Properties": {**ROLE["Properties"], "Policies": [
            {"PolicyName": name, "PolicyDocument": {"Statement": []}}]}}

    r = _template(
        FrameworkRole=role("framework"), HandlerRole=role("handler"),
        Handler={"Type": "AWS::Lambda::Function", "Properties": {
            "FunctionName": "handler", "Role": {"Fn::GetAtt": ["HandlerRole", "Arn"]}}},
        Framework={"Type": "AWS::Lambda::Function", "Properties": {
            "FunctionName": "framework", "Role": {"Fn::GetAtt": ["FrameworkRole", "Arn"]},
            "Environment": {"Variables": {"USER_ON_EVENT_FUNCTION_ARN": {"Fn::GetAtt": ["Handler", "Arn"]}}}}})
    calls = w.kubectl_handler_calls(r)
    role = "arn:aws:iam::111122223333:role/<AWS::IAM::Role generated-name {}>"
    assert [(c.request.principal, c.request.action, c.request.resource) for c in calls] == [
        (role.format("FrameworkRole"), "lambda:InvokeFunction", "arn:aws:lambda:us-east-2:111122223333:function:handler"),
        (role.format("HandlerRole"), "eks:DescribeCluster", "arn:aws:eks:us-east-2:111122223333:cluster/demo")]
    assert [[p.name for p in c.policies] for c in calls] == [["FrameworkRole inline framework"], ["HandlerRole inline handler"]]
