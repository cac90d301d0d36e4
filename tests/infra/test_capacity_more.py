"""How a node group buys its instances (tools.seams.capacity), more cases on the small templates of
test_seams_capacity: the zones of subnets the template does not spell out, and which placement groups are new."""

from __future__ import annotations

from tests.infra.test_seams_capacity import BLOCK, BLOCK_DATA, problems, template

TARGETED = {"CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": BLOCK}}}


def test_a_capacity_block_group_on_two_subnets_of_unresolved_zones_is_refused():
    # Two subnets whose zones the template leaves to deploy time (Fn::GetAZs) may be in two zones: each counts as
    # its own zone, so a Capacity Block group on both is refused, naming them.
    zones = ({"Fn::Select": [0, {"Fn::GetAZs": ""}]}, {"Fn::Select": [1, {"Fn::GetAZs": ""}]})
    assert [p.split(": ", 2)[2] for p in problems(template("CAPACITY_BLOCK", BLOCK_DATA, instance_types=(), zones=zones))] \
        == ["a Capacity Block's instances launch in its one zone; the group's subnets are in <zone of Subnet0>, "
            "<zone of Subnet1>"]


def test_a_capacity_block_group_on_one_subnet_of_an_unresolved_zone_passes():
    zones = ({"Fn::Select": [0, {"Fn::GetAZs": ""}]},)
    assert problems(template("CAPACITY_BLOCK", BLOCK_DATA, instance_types=(), zones=zones)) == []


def test_a_reservation_launching_into_a_group_named_by_a_parameter_passes():
    # Only a Ref to an AWS::EC2::PlacementGroup the stack creates is a new group no reservation was made in; a group
    # named by a parameter may be the existing one the reservation was made in.
    t = template("ON_DEMAND", {**TARGETED, "Placement": {"GroupName": {"Ref": "PlacementGroupName"}}})
    t["Parameters"] = {"PlacementGroupName": {"Type": "String", "Default": "training-cluster-pg"}}
    assert problems(t) == []


def test_a_reservation_launching_into_the_stacks_new_placement_group_is_refused():
    [problem] = problems(template("ON_DEMAND", TARGETED, placement_group=True))
    assert problem.endswith("targets a reservation and launches into the stack's new cluster placement group; a "
                            "reservation launches only into the group it was created in")
