"""How a node group buys its instances (tools.seams.capacity), case by case: each rule held on both sides, on the
small templates of test_seams_capacity."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_capacity import BLOCK, BLOCK_DATA, problems, template


def test_a_group_without_a_capacity_type_is_on_demand():
    # EKS API Reference, CreateNodegroup capacityType: ON_DEMAND when unset. An on-demand group may name its
    # instance type in the launch template (a spot group may not).
    t = template("ON_DEMAND", {"InstanceType": "g6.12xlarge"}, instance_types=())
    del t["Resources"]["Group0"]["Properties"]["CapacityType"]
    assert problems(t) == []


def test_a_capacity_block_targeted_through_a_resource_group_lacks_the_block_id():
    # EKS User Guide, Capacity Blocks: the launch template's CapacityReservationTarget names the block by its
    # CapacityReservationId; a resource group ARN is a target, but not the block EKS asks for.
    target = {"CapacityReservationTarget": {
        "CapacityReservationResourceGroupArn": "arn:aws:resource-groups:us-east-2:123456789012:group/blocks"}}
    data = {**BLOCK_DATA, "CapacityReservationSpecification": target}
    assert [p.split(": ", 2)[2] for p in problems(template("CAPACITY_BLOCK", data, instance_types=()))] == [
        "a Capacity Block group's launch template needs CapacityReservationTarget CapacityReservationId, the block; "
        "EKS rejects the create"]


@pytest.mark.parametrize("preference", ["open", "none", "capacity-reservations-only"])
def test_a_reservation_preference_without_a_target_is_valid(preference):
    # EC2 API Reference, CapacityReservationSpecification: a preference alone is valid (open is the default);
    # only a preference beside a target must be capacity-reservations-only.
    data = {"CapacityReservationSpecification": {"CapacityReservationPreference": preference}}
    assert problems(template("ON_DEMAND", data)) == []


def test_a_reservation_launching_into_an_existing_placement_group_is_not_the_new_group_case():
    # The placement-group rule is about the stack's own new group (a Ref to an AWS::EC2::PlacementGroup): a group
    # named by its literal name may be the one the reservation was made in.
    data = {"CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": BLOCK}},
            "Placement": {"GroupName": "training-cluster-pg"}}
    assert problems(template("ON_DEMAND", data)) == []


def test_a_capacity_block_group_without_subnets_has_no_zone_of_the_block():
    # EKS's CreateNodegroup requires subnets; a Capacity Block group needs exactly the block's one zone.
    t = template("CAPACITY_BLOCK", BLOCK_DATA, instance_types=(), zones=())
    assert [p.split(": ", 2)[2] for p in problems(t)] == [
        "a Capacity Block's instances launch in its one zone; the group's subnets are in none"]
