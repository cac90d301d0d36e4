"""CloudFormation's creation order (tools.seams.order), case by case: every way a template names another resource,
and which node groups a chart or an add-on is held to."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_order import base, chart, problems
from tools.seams import order

GPU = {"Type": "AWS::EKS::Nodegroup", "Properties": {
    "ClusterName": {"Ref": "Cluster"}, "Labels": {"role": "gpu-worker"},
    "ScalingConfig": {"MinSize": 0, "MaxSize": 2, "DesiredSize": 0}}}
OBSERVABILITY = {"Type": "AWS::EKS::Addon", "Properties": {"ClusterName": {"Ref": "Cluster"},
                                                            "AddonName": "amazon-cloudwatch-observability"}}


@pytest.mark.parametrize("reference", [
    {"Ref": "System"},
    {"Fn::GetAtt": ["System", "Arn"]},
    {"Fn::GetAtt": "System.Arn"},  # the string form of Fn::GetAtt
    {"Fn::Sub": "${System.Arn}"},  # a Sub variable with an attribute names the resource before the '.'
    {"Fn::Sub": "${System}"},
    {"Fn::Sub": ["${Group}", {"Group": {"Ref": "System"}}]},  # a Ref in the Sub's own variable map
])
def test_every_reference_form_orders_the_chart_after_the_group(reference):
    # CloudFormation User Guide, "DependsOn attribute": Ref, Fn::GetAtt and Fn::Sub make a dependency.
    assert problems(base(KubeRay=chart({"role": "system"}, Note=reference))) == []


def test_a_literal_dollar_brace_in_sub_is_no_reference():
    # "${!Literal}" is written as "${Literal}": it names no resource.
    assert order.direct_dependencies({"Properties": {"A": {"Fn::Sub": "${!System}"}}}) == set()


def test_an_add_on_after_a_group_that_may_have_no_node_is_still_unordered():
    # A group of MinSize 0 (the GPU group) may hold no node when the add-on is created: only MinSize >= 1 counts.
    [problem] = problems(base(Gpu=GPU, Observability={**OBSERVABILITY, "DependsOn": ["Gpu"]}))
    assert problem.endswith("may create it before node group System")


def test_a_chart_without_a_node_selector_is_held_to_no_group():
    t = base(Plugin=chart({}))
    assert problems(t) == []


def test_a_selector_is_satisfied_only_by_a_group_holding_every_label():
    # Kubernetes nodeSelector: every key must match; the system group lacks "tier".
    assert problems(base(KubeRay=chart({"role": "system", "tier": "core"}))) == []


def test_a_chart_two_groups_can_host_needs_to_follow_only_one():
    other = {"Type": "AWS::EKS::Nodegroup", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "Labels": {"role": "system"},
        "ScalingConfig": {"MinSize": 1, "MaxSize": 1, "DesiredSize": 1}}}
    assert problems(base(Spare=other, KubeRay=chart({"role": "system"}, depends_on=["Spare"]))) == []
