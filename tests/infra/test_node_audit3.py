"""tools.seams.node: a node group without a launch template (EKS then uses its own, which this check cannot read)
is passed over, and the node groups after it are still checked."""

from __future__ import annotations

from tests.infra.test_seams_node import nodegroup_template
from tools.seams import node
from tools.seams.cfn import Resolver


def test_a_group_without_a_launch_template_is_passed_over_and_the_next_group_is_still_checked():
    template = nodegroup_template(None)
    # Listed first, so that a check that stopped at it would never reach the EFA group after it.
    template["Resources"] = {"Plain": {"Type": "AWS::EKS::Nodegroup", "Properties": {"ClusterName": {"Ref": "Cluster"}}},
                             **template["Resources"]}
    resolver = Resolver(template, "us-east-2")
    assert node.launch_template_of(resolver, "Plain") is None
    assert node.problems(resolver) == [
        "node: Gpu: EFA pods need an unlimited memlock, a container gets 8 MiB (AL2023's default; no containerd "
        "LimitMEMLOCK drop-in in launch template Template's user data)"]
