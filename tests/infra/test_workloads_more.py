"""Each workload's AWS calls (tools.seams.workloads), more cases on small templates: each call made as the role of
the function that makes it, Pod Identity's request context as a trust policy's conditions read it, and which
policies and service accounts belong to whom."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_workloads import autoscaler_template, denied
from tools.seams import workloads as w
from tools.seams.cfn import Resolver, SeamError


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


def test_an_add_ons_service_account_is_in_the_add_ons_own_namespace():
    # EKS User Guide, the CloudWatch observability add-on: its agent runs as amazon-cloudwatch/cloudwatch-agent.
    t = {"Resources": {
        "AgentRole": _role("agent"),
        "Addon": {"Type": "AWS::EKS::Addon", "Properties": {
            "AddonName": "amazon-cloudwatch-observability", "ClusterName": "demo", "PodIdentityAssociations": [
                {"ServiceAccount": "cloudwatch-agent", "RoleArn": {"Fn::GetAtt": ["AgentRole", "Arn"]}}]}}}}
    assert w.pod_identity_roles(Resolver(t)) == {("amazon-cloudwatch", "cloudwatch-agent"): "AgentRole"}


def test_a_roles_policies_are_those_attached_to_it_only():
    t = {"Resources": {
        "Mine": _role("mine"), "Other": _role("other"),
        "OtherPolicy": {"Type": "AWS::IAM::Policy", "Properties": {
            "PolicyName": "other", "Roles": [{"Ref": "Other"}],
            "PolicyDocument": {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}}}}}
    r = Resolver(t)
    assert w.role_policies(r, "Mine") == () and [p.name for p in w.role_policies(r, "Other")] == ["OtherPolicy"]


def test_a_customer_managed_policy_stops_the_check():
    # Its document is not in the template: judging the role without it could report a false denial.
    t = {"Resources": {"Mine": {**_role("mine")}}}
    t["Resources"]["Mine"]["Properties"]["ManagedPolicyArns"] = ["arn:aws:iam::111122223333:policy/mine"]
    with pytest.raises(SeamError, match=r"Mine: customer managed policy arn:aws:iam::111122223333:policy/mine is not "
                                        r"modelled"):
        w.role_policies(Resolver(t), "Mine")


def test_each_node_assumes_pod_roles_through_the_agent_as_its_node_role():
    # The Pod Identity agent on each node calls eks-auth:AssumeRoleForPodIdentity on the cluster as the node's role
    # (EKS User Guide, Pod Identity: the node role needs it); no image, so no pull call.
    t = {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}}, "NodeRole": _role("node"),
        "Nodes": {"Type": "AWS::EKS::Nodegroup", "Properties": {
            "ClusterName": {"Ref": "Cluster"}, "NodeRole": {"Fn::GetAtt": ["NodeRole", "Arn"]}}}}}
    r = Resolver(t, "us-east-2")
    assert [(c.request.principal, c.request.action, c.request.resource) for c in w.node_calls(r, [])] == [
        (w.role_arn(r, "NodeRole"), "eks-auth:AssumeRoleForPodIdentity", w.cluster_arn(r))]


@pytest.mark.parametrize("value", [{"Fn::GetAtt": ["NodeRole", "Arn"]}, {"Fn::GetAtt": "NodeRole.Arn"}])
def test_a_roles_arn_names_its_logical_id_in_either_getatt_form(value):
    # CloudFormation's Fn::GetAtt takes [logicalId, attribute] or the short "logicalId.attribute".
    assert w.logical_id_of_arn(value) == "NodeRole"
