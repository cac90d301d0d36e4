"""Creation order: what runs on a node group is created after it (tools.seams.order)."""

from __future__ import annotations

import json

from tools.seams import order
from tools.seams.cfn import Resolver


def base(**resources) -> dict:
    return {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
        "System": {"Type": "AWS::EKS::Nodegroup", "Properties": {
            "ClusterName": {"Ref": "Cluster"}, "Labels": {"role": "system"},
            "ScalingConfig": {"MinSize": 1, "MaxSize": 1, "DesiredSize": 1}}},
        **resources}}


def chart(selector: dict, depends_on=None, **props) -> dict:
    resource = {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "Chart": "kuberay-operator", "Values": json.dumps({"nodeSelector": selector}), **props}}
    if depends_on:
        resource["DependsOn"] = depends_on
    return resource


def problems(template: dict) -> list[str]:
    return order.problems(Resolver(template, "us-east-2"))


def test_a_chart_for_the_system_node_without_a_dependency_is_refused():
    [problem] = problems(base(KubeRay=chart({"role": "system"})))
    assert problem.startswith("order: Helm chart KubeRay (kuberay-operator) runs only on node group System")


def test_depends_on_orders_it():
    assert problems(base(KubeRay=chart({"role": "system"}, depends_on=["System"]))) == []


def test_a_ref_chain_orders_it_too():
    # CloudFormation waits for what a resource references (Ref/GetAtt), transitively.
    t = base(Barrier={"Type": "AWS::SSM::Parameter", "Properties": {"Value": {"Fn::GetAtt": ["System", "Arn"]}}},
             KubeRay=chart({"role": "system"}, Note={"Ref": "Barrier"}))
    assert problems(t) == []


def test_a_chart_for_another_groups_labels_is_not_held_to_this_group():
    assert problems(base(Plugin=chart({"nvidia.com/gpu.present": "true"}))) == []


def test_an_add_on_with_pods_must_follow_an_always_on_group():
    addon = {"Type": "AWS::EKS::Addon", "Properties": {"ClusterName": {"Ref": "Cluster"},
                                                        "AddonName": "amazon-cloudwatch-observability"}}
    [problem] = problems(base(Observability=addon))
    assert "add-on Observability (amazon-cloudwatch-observability)" in problem
    assert problems(base(Observability={**addon, "DependsOn": "System"})) == []


def test_node_prerequisite_add_ons_need_no_node():
    cni = {"Type": "AWS::EKS::Addon", "Properties": {"ClusterName": {"Ref": "Cluster"}, "AddonName": "vpc-cni"}}
    assert problems(base(Cni=cni)) == []


def test_the_synthesized_stack_creates_its_system_workloads_after_the_system_node(template):
    synthesized = template.to_json()
    [system] = [lid for lid, r in synthesized["Resources"].items()
                if r["Type"] == "AWS::EKS::Nodegroup" and r["Properties"]["Labels"].get("role") == "system"]
    after = {lid for lid, r in synthesized["Resources"].items()
             if r["Type"] in ("AWS::EKS::Addon", "Custom::AWSCDK-EKS-HelmChart")
             and system in order.created_before(synthesized, lid)}
    charts = {r["Properties"].get("Chart") or r["Properties"].get("AddonName") for lid, r in synthesized["Resources"].items()
              if lid in after}
    assert {"amazon-cloudwatch-observability", "kuberay-operator", "cluster-autoscaler"} <= charts
    assert problems(synthesized) == []
