"""Which identity policies are a role's (tools.seams.workloads.role_policies): its inline Policies, an
AWS::IAM::Policy or AWS::IAM::ManagedPolicy naming it in Roles, and no policy attached to another role."""

from __future__ import annotations

import copy

import pytest

from tests.infra.test_seams_workloads import autoscaler_template, denied, pod_identity_role
from tools.seams import workloads as w
from tools.seams.cfn import Resolver, SeamError

GRANTING = autoscaler_template({"Fn::GetAtt": ["Gpu", "NodegroupName"]})


def _moved(kind: str) -> dict:
    """The autoscaler's grant held another way (CloudFormation User Guide: AWS::IAM::Role Policies,
    AWS::IAM::Policy / AWS::IAM::ManagedPolicy Roles)."""
    t = copy.deepcopy(GRANTING)
    policy = t["Resources"].pop("RolePolicy")["Properties"]
    if kind == "inline":
        t["Resources"]["Role"]["Properties"]["Policies"] = [
            {"PolicyName": policy["PolicyName"], "PolicyDocument": policy["PolicyDocument"]}]
    elif kind == "managed":
        t["Resources"]["Managed"] = {"Type": "AWS::IAM::ManagedPolicy", "Properties": {
            "Roles": [{"Ref": "Role"}], "PolicyDocument": policy["PolicyDocument"]}}
    else:  # attached to another role only
        t["Resources"]["Other"] = {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": []}}}
        t["Resources"]["OtherPolicy"] = {"Type": "AWS::IAM::Policy", "Properties": {
            "PolicyName": "q", "Roles": [{"Ref": "Other"}], "PolicyDocument": policy["PolicyDocument"]}}
    return t


@pytest.mark.parametrize("kind, granted", [("inline", True), ("managed", True), ("another role's", False)])
def test_a_roles_policies_are_its_inline_and_attached_ones_only(kind, granted):
    assert denied(GRANTING, w.autoscaler_calls) == []  # the control: the same grant as an AWS::IAM::Policy
    assert (denied(_moved(kind), w.autoscaler_calls) == []) is granted


def test_a_call_judged_against_an_unmodelled_managed_policy_fails_loudly():
    # managed_policies.py lists AmazonEKSClusterPolicy as attached but not modelled: judging a call as a role that
    # holds it must stop the harness, not leave the policy's grants (or denials) out of the verdict.
    t = copy.deepcopy(GRANTING)
    t["Resources"]["Role"]["Properties"]["ManagedPolicyArns"] = ["arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"]
    with pytest.raises(SeamError, match=r"Role: a call is judged against AmazonEKSClusterPolicy, which the harness "
                                        r"does not model"):
        w.autoscaler_calls(Resolver(t, "us-east-2"))


@pytest.mark.parametrize("service, denials", [("pods.eks.amazonaws.com", 0), ("ec2.amazonaws.com", 2)])
def test_pod_identity_needs_a_trust_policy_naming_its_service(service, denials):
    # A trust policy is resource-based: its Principal must name the caller, pods.eks.amazonaws.com for Pod Identity
    # (EKS User Guide, "Pod Identity"), or sts:AssumeRole and sts:TagSession are denied.
    t = copy.deepcopy(GRANTING)
    t["Resources"]["Role"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] = {"Service": service}
    assert len(denied(t, w.pod_identity_calls)) == denials


def test_the_cloudwatch_agent_puts_metrics_and_reads_tags_and_volumes_on_any_resource():
    # amazon-cloudwatch-agent's Container Insights metrics (cloudwatch:PutMetricData) and the EBS/instance tags it
    # reads: the actions CloudWatchAgentServerPolicy grants on "*".
    t = {"Resources": {"Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
                       **pod_identity_role("amazon-cloudwatch", "cloudwatch-agent", [])}}
    calls = {(c.workload, c.request.action, c.request.resource) for c in w.observability_calls(Resolver(t, "us-east-2"))
             if not c.request.action.startswith("logs:")}
    assert calls == {("CloudWatch agent", action, "*")
                     for action in ("cloudwatch:PutMetricData", "ec2:DescribeTags", "ec2:DescribeVolumes")}
