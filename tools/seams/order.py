"""CloudFormation's creation order: what runs pods on a node group is created after it.

CloudFormation creates a resource only after every resource it names in DependsOn, Ref, Fn::GetAtt or
Fn::Sub (CloudFormation User Guide, "DependsOn attribute": "resources that use Ref or GetAtt ... are
created after the resource they reference"); nothing else orders two resources. So:
- a Helm chart whose nodeSelector only a node group's labels satisfy must follow that group: a chart
  installed with --wait times out with nothing to run on, one without it leaves pods pending through
  the first minutes of logs and metrics;
- an EKS add-on with pods of its own (every add-on but the node prerequisites, vpc-cni and
  eks-pod-identity-agent, which nodes need before they are Ready) must follow a node group that always
  has a node (min size at least 1), else it is created DEGRADED.
"""

from __future__ import annotations

import json
import re

from tools.seams.cfn import Resolver

NODE_PREREQUISITE_ADDONS = {"vpc-cni", "eks-pod-identity-agent", "kube-proxy", "coredns"}


def direct_dependencies(resource: dict) -> set[str]:
    found = set(resource.get("DependsOn") or []) if isinstance(resource.get("DependsOn"), list) else (
        {resource["DependsOn"]} if resource.get("DependsOn") else set())

    def walk(value) -> None:
        if isinstance(value, dict):
            if len(value) == 1 and "Ref" in value and not str(value["Ref"]).startswith("AWS::"):
                found.add(value["Ref"])
            elif len(value) == 1 and "Fn::GetAtt" in value:
                target = value["Fn::GetAtt"]
                found.add(target.split(".")[0] if isinstance(target, str) else target[0])
            elif len(value) == 1 and "Fn::Sub" in value:
                # A variable of the Sub's own map names no resource, even one spelled like a logical ID.
                text, variables = (value["Fn::Sub"], {}) if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"]
                found.update(name.split(".")[0] for name in re.findall(r"\$\{([^}!]+)\}", text)
                             if not name.startswith("AWS::") and name not in variables)
                walk(value["Fn::Sub"])
            else:
                for v in value.values():
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
    walk(resource.get("Properties", {}))
    return found


def created_before(template: dict, logical_id: str) -> set[str]:
    """Every resource CloudFormation must finish before it creates `logical_id`."""
    resources, seen, stack = template["Resources"], set(), [logical_id]
    while stack:
        for dependency in direct_dependencies(resources[stack.pop()]):
            if dependency in resources and dependency not in seen:
                seen.add(dependency)
                stack.append(dependency)
    return seen


def _selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def problems(r: Resolver) -> list[str]:
    template, found = r.template, []
    groups = {lid: r.properties(lid) for lid, res in r.resources.items() if res["Type"] == "AWS::EKS::Nodegroup"}
    always_on = {lid for lid, props in groups.items() if props.get("ScalingConfig", {}).get("MinSize", 0) >= 1}
    for lid, resource in r.resources.items():
        if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart":
            values = json.loads(r.properties(lid).get("Values") or "{}")
            selector = values.get("nodeSelector") or {}
            hosts = [g for g, props in groups.items() if _selects(selector, props.get("Labels") or {})]
            before = created_before(template, lid)
            if hosts and not any(h in before for h in hosts):
                found.append(f"order: Helm chart {lid} ({r.properties(lid)['Chart']}) runs only on node group "
                             f"{' or '.join(hosts)} (nodeSelector {selector}) but CloudFormation may create it first")
        elif resource["Type"] == "AWS::EKS::Addon":
            name = r.properties(lid)["AddonName"]
            if name not in NODE_PREREQUISITE_ADDONS and always_on and not always_on & created_before(template, lid):
                found.append(f"order: add-on {lid} ({name}) has pods of its own but CloudFormation may create it "
                             f"before node group {' or '.join(sorted(always_on))}")
    return found
