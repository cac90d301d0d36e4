"""CloudFormation's creation order (tools.seams.order): the dependency forms of the CloudFormation User Guide
("DependsOn attribute", "Ref", "Fn::GetAtt", "Fn::Sub") and which add-ons must wait for a node."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_order import base, chart, problems
from tools.seams import order


@pytest.mark.parametrize("resource, dependencies", [
    # DependsOn takes a single logical ID as a string as well as a list of them.
    ({"DependsOn": "System"}, {"System"}),
    ({"DependsOn": ["System", "Cluster"]}, {"System", "Cluster"}),
    # A Ref to a pseudo parameter (AWS::Region...) names no resource; a logical ID that merely starts with
    # "AWS" is still a resource.
    ({"Properties": {"A": {"Ref": "AWS::Region"}, "B": {"Ref": "AWSLoadBalancerController"}}},
     {"AWSLoadBalancerController"}),
    # Fn::GetAtt names the resource before the attribute, in both forms; Fn::Sub the name before a '.'.
    ({"Properties": {"A": {"Fn::GetAtt": "Role.Arn"}, "B": {"Fn::GetAtt": ["Key", "Arn"]}}}, {"Role", "Key"}),
    ({"Properties": {"A": {"Fn::Sub": "${Role.Arn}/${AWS::Region}/${Bucket}"}}}, {"Role", "Bucket"}),
    ({"Properties": {"A": {"Fn::Sub": ["${X}", {"X": {"Ref": "Bucket"}}]}}}, {"Bucket"}),
    # "Fn::Sub": a variable of the map is used before a resource of that name: it makes no dependency.
    ({"Properties": {"A": {"Fn::Sub": ["${System}-x", {"System": "literal"}]}}}, set()),
])
def test_every_dependency_form_is_found(resource, dependencies):
    assert order.direct_dependencies(resource) == dependencies


def test_dependencies_are_followed_through_every_step():
    # CloudFormation waits for the whole chain: C depends on B, which depends on A.
    t = {"Resources": {"A": {"Type": "T"}, "B": {"Type": "T", "DependsOn": "A"},
                       "C": {"Type": "T", "Properties": {"X": {"Ref": "B"}}}}}
    assert order.created_before(t, "C") == {"A", "B"}


ADDON = {"Type": "AWS::EKS::Addon", "Properties": {"ClusterName": {"Ref": "Cluster"}}}


@pytest.mark.parametrize("name, refused", [
    # The node prerequisites: nodes need the CNI and the Pod Identity agent before they are Ready, so these are
    # created before any node group; every other add-on runs pods that need a node.
    ("vpc-cni", False), ("eks-pod-identity-agent", False),
    ("amazon-cloudwatch-observability", True), ("aws-efs-csi-driver", True),
])
def test_only_node_prerequisite_add_ons_may_come_before_the_always_on_group(name, refused):
    t = base(Addon={**ADDON, "Properties": {**ADDON["Properties"], "AddonName": name}})
    assert bool(problems(t)) is refused


def test_a_chart_is_held_to_the_group_its_selector_picks():
    gpu = {"Type": "AWS::EKS::Nodegroup", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "Labels": {"role": "gpu-worker"},
        "ScalingConfig": {"MinSize": 0, "MaxSize": 2, "DesiredSize": 0}}}
    # Following the system group does not order a chart that only the GPU group's labels satisfy.
    [problem] = problems(base(Gpu=gpu, Plugin=chart({"role": "gpu-worker"}, depends_on=["System"])))
    assert "runs only on node group Gpu (nodeSelector {'role': 'gpu-worker'})" in problem
    assert problems(base(Gpu=gpu, Plugin=chart({"role": "gpu-worker"}, depends_on=["Gpu"]))) == []
