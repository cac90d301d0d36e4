"""cdk_constructs/vpc_cni.py: the VPC CNI add-on enforces NetworkPolicies, takes over the bootstrapped CNI, and gets
AmazonEKS_CNI_Policy through Pod Identity (after the agent that serves it), not from the node role."""

from __future__ import annotations

import json

import pytest

from cdk_constructs.vpc_cni import vpc_cni_configuration
from tests.conftest import UNDER_MUTATION, only, resources_of


@pytest.mark.parametrize("network_policy,value", [(True, "true"), (False, "false")])
def test_network_policy_is_the_add_ons_string_flag(network_policy, value):
    # The add-on's configuration schema (aws eks describe-addon-configuration) types enableNetworkPolicy a string.
    assert vpc_cni_configuration(network_policy) == {"enableNetworkPolicy": value}


def _addon(template) -> dict:
    return only(template, "AWS::EKS::Addon", lambda r: r["Properties"]["AddonName"] == "vpc-cni")


@pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")
def test_the_add_on_overwrites_the_bootstrapped_cni_with_network_policy_on(template):
    props = _addon(template)["Properties"]
    assert json.loads(props["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    assert props["ResolveConflicts"] == "OVERWRITE"


@pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")
def test_aws_node_gets_the_cni_policy_through_pod_identity_after_the_agent(template):
    addon = _addon(template)
    [association] = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    role = template.to_json()["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]
    assert [a["Fn::Join"][1][-1] for a in role["Properties"]["ManagedPolicyArns"]] == [":iam::aws:policy/AmazonEKS_CNI_Policy"]
    [agent] = [k for k, r in resources_of(template, "AWS::EKS::Addon").items()
               if r["Properties"]["AddonName"] == "eks-pod-identity-agent"]
    assert agent in addon["DependsOn"]
