"""EKS's and EC2's side of the seam (tools.seams.capacity): an empty InstanceTypes names no instance type."""

from __future__ import annotations

from tests.infra.test_seams_capacity import BLOCK_DATA, problems, template


def test_an_empty_instance_types_list_is_no_instance_type():
    # CreateNodegroup's instanceTypes: an empty list is no type at all, and EKS launches its default, t3.medium.
    t = template("ON_DEMAND", {})
    t["Resources"]["Group0"]["Properties"]["InstanceTypes"] = []
    [problem] = problems(t)
    assert problem.endswith("no instance type in the launch template or InstanceTypes; EKS launches t3.medium")


def test_a_capacity_block_group_buying_another_market_is_rejected():
    # EKS User Guide, Capacity Blocks: the launch template's MarketType must be capacity-block; spot is not it.
    data = {**BLOCK_DATA, "InstanceMarketOptions": {"MarketType": "spot"}}
    [problem] = problems(template("CAPACITY_BLOCK", data, instance_types=()))
    assert "needs InstanceMarketOptions MarketType capacity-block, it has spot" in problem
