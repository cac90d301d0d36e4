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


def test_a_reservation_group_target_with_the_stacks_new_placement_group_cannot_launch():
    # EC2 User Guide, "Capacity Reservations for cluster placement groups": a reservation, whether targeted by id or
    # through a resource group of reservations, launches only into the placement group it was created in.
    group_arn = "arn:aws:resource-groups:us-east-2:123456789012:group/training-reservations"
    data = {"CapacityReservationSpecification": {"CapacityReservationTarget": {
        "CapacityReservationResourceGroupArn": group_arn}}}
    [problem] = problems(template("ON_DEMAND", data, placement_group=True))
    assert problem.endswith("targets a reservation and launches into the stack's new cluster placement group; a "
                            "reservation launches only into the group it was created in")
