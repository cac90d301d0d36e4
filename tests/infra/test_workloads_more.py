"""Each workload's AWS calls (tools.seams.workloads), more cases on small templates: each call made as the role of
the function that makes it."""

from __future__ import annotations

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
