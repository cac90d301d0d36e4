"""How a node group buys its instances, as EKS and EC2 read the node group and its launch template together
(tools.seams.capacity), and what Cluster Autoscaler reads to start such a group from zero (tools.seams.workloads).
Each rule has a template that breaks it; the stack's own templates pass (test_capacity)."""

from __future__ import annotations

import pytest

from tools.seams import capacity
from tools.seams.cfn import Resolver

BLOCK = "cr-0123456789abcdef0"


def template(capacity_type="ON_DEMAND", data=None, instance_types=("g6.12xlarge",), zones=("us-east-2a",),
             placement_group=False) -> dict:
    """A node group, its launch template, its subnets (and a new cluster placement group)."""
    data = dict(data or {})
    resources = {f"Subnet{i}": {"Type": "AWS::EC2::Subnet", "Properties": {"AvailabilityZone": zone, "VpcId": "vpc-1",
                                                                          "CidrBlock": f"10.0.{i}.0/24"}}
                 for i, zone in enumerate(zones)}
    if placement_group:
        resources["Group"] = {"Type": "AWS::EC2::PlacementGroup", "Properties": {"Strategy": "cluster"}}
        data["Placement"] = {"GroupName": {"Ref": "Group"}}
    resources["Template"] = {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": data}}
    group = {"ClusterName": "c", "NodeRole": "arn:aws:iam::123456789012:role/n", "CapacityType": capacity_type,
             "Subnets": [{"Ref": f"Subnet{i}"} for i in range(len(zones))],
             "LaunchTemplate": {"Id": {"Ref": "Template"}, "Version": "1"},
             "ScalingConfig": {"MinSize": 0, "MaxSize": 2, "DesiredSize": 0}}
    if instance_types:
        group["InstanceTypes"] = list(instance_types)
    resources["Group0"] = {"Type": "AWS::EKS::Nodegroup", "Properties": group}
    return {"Resources": resources}


def problems(t: dict) -> list[str]:
    return capacity.problems(Resolver(t))


BLOCK_DATA = {"InstanceMarketOptions": {"MarketType": "capacity-block"}, "InstanceType": "p5.48xlarge",
              "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": BLOCK}}}


def test_a_capacity_block_group_as_the_eks_guide_writes_it_passes():
    assert problems(template("CAPACITY_BLOCK", BLOCK_DATA, instance_types=())) == []


def test_spot_and_on_demand_groups_with_their_types_on_the_group_pass():
    assert problems(template("SPOT")) == [] and problems(template("ON_DEMAND")) == []


@pytest.mark.parametrize("drop,missing", [
    ("InstanceMarketOptions", "needs InstanceMarketOptions MarketType capacity-block, it has none; EKS rejects the create"),
    ("CapacityReservationSpecification", "needs CapacityReservationTarget CapacityReservationId, the block; EKS rejects"),
])
def test_a_capacity_block_group_without_what_eks_requires_is_broken(drop, missing):
    data = {k: v for k, v in BLOCK_DATA.items() if k != drop}
    [problem] = problems(template("CAPACITY_BLOCK", data, instance_types=()))
    assert problem.startswith("capacity: Group0 (CAPACITY_BLOCK, launch template Template): a Capacity Block group's "
                              "launch template " + missing)


def test_a_capacity_block_group_with_its_type_on_the_group_only_is_broken_twice():
    data = {k: v for k, v in BLOCK_DATA.items() if k != "InstanceType"}
    assert [p.split(": ", 2)[2] for p in problems(template("CAPACITY_BLOCK", data, instance_types=("p5.48xlarge",)))] == [
        "a Capacity Block group's launch template needs its InstanceType; EKS rejects the create"]


def test_an_instance_type_in_both_places_is_refused_by_eks():
    [problem] = problems(template("CAPACITY_BLOCK", BLOCK_DATA, instance_types=("p5.48xlarge",)))
    assert problem.endswith("an instance type in both the launch template and InstanceTypes; EKS refuses the group")


def test_a_group_with_no_instance_type_anywhere_gets_t3_medium():
    [problem] = problems(template("ON_DEMAND", {}, instance_types=()))
    assert problem.endswith("no instance type in the launch template or InstanceTypes; EKS launches t3.medium")


def test_a_capacity_block_group_across_zones_cannot_launch_in_the_other():
    [problem] = problems(template("CAPACITY_BLOCK", BLOCK_DATA, instance_types=(), zones=("us-east-2a", "us-east-2b")))
    assert problem.endswith("a Capacity Block's instances launch in its one zone; the group's subnets are in us-east-2a, "
                            "us-east-2b")


def test_a_capacity_block_market_on_another_capacity_type_is_rejected():
    [problem] = problems(template("ON_DEMAND", BLOCK_DATA, instance_types=()))
    assert problem.endswith("the launch template buys from a Capacity Block, the group's capacityType is ON_DEMAND; EKS "
                            "rejects the create unless it is CAPACITY_BLOCK")


def test_a_spot_group_that_asks_a_market_or_a_reservation_of_its_own_is_broken():
    data = {"InstanceMarketOptions": {"MarketType": "spot"},
            "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": BLOCK}}}
    assert [p.split(": ", 2)[2] for p in problems(template("SPOT", data))] == [
        "a spot group's launch template sets InstanceMarketOptions spot; EKS buys spot through the group, the template "
        "asks for no market",
        "a spot group targets a Capacity Reservation, which holds On-Demand capacity"]


def test_a_spot_group_with_its_type_in_the_launch_template_is_against_the_eks_guide():
    [problem] = problems(template("SPOT", {"InstanceType": "g6.12xlarge"}, instance_types=()))
    assert problem.endswith("a spot group names its instance type in the launch template; EKS wants it in InstanceTypes")


@pytest.mark.parametrize("preference,broken", [("open", True), ("none", True), ("capacity-reservations-only", False)])
def test_a_reservation_preference_beside_a_target_must_be_reservations_only(preference, broken):
    data = {"CapacityReservationSpecification": {"CapacityReservationPreference": preference,
                                                 "CapacityReservationTarget": {"CapacityReservationId": BLOCK}}}
    found = problems(template("ON_DEMAND", data))
    assert bool(found) == broken
    if broken:
        assert found[0].endswith(f"CapacityReservationPreference {preference} beside a CapacityReservationTarget; EC2 "
                                 "takes both only with capacity-reservations-only")


def test_a_reservation_resource_group_is_a_target_too():
    """EC2 API Reference, CapacityReservationTarget: a reservation is targeted by its id or by the ARN of a
    resource group of reservations; either holds On-Demand capacity and takes only capacity-reservations-only."""
    group_arn = "arn:aws:resource-groups:us-east-2:123456789012:group/training-reservations"
    target = {"CapacityReservationTarget": {"CapacityReservationResourceGroupArn": group_arn}}
    assert [p.split(": ", 2)[2] for p in problems(template("SPOT", {"CapacityReservationSpecification": target}))] == [
        "a spot group targets a Capacity Reservation, which holds On-Demand capacity"]
    beside_open = {"CapacityReservationSpecification": {**target, "CapacityReservationPreference": "open"}}
    assert [p.split(": ", 2)[2] for p in problems(template("ON_DEMAND", beside_open))] == [
        "CapacityReservationPreference open beside a CapacityReservationTarget; EC2 takes both only with "
        "capacity-reservations-only"]


def test_a_reservation_with_the_stacks_new_placement_group_cannot_launch():
    data = {"CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": BLOCK}}}
    [problem] = problems(template("ON_DEMAND", data, placement_group=True))
    assert problem.endswith("targets a reservation and launches into the stack's new cluster placement group; a "
                            "reservation launches only into the group it was created in")
    assert problems(template("ON_DEMAND", {}, placement_group=True)) == []


# ------------------------------------------------------------------ Cluster Autoscaler, from zero


def test_the_autoscaler_reads_a_capacity_block_groups_type_from_its_launch_template(block_template):
    """aws_wrapper.go getInstanceTypeByLaunchTemplate: DescribeLaunchTemplateVersions on the group's template; a
    role that may not read it can never start the group from zero."""
    from tools.seams import workloads
    from tools.seams.cfn import resolve_template

    r = resolve_template(block_template)
    calls = [c for c in workloads.autoscaler_calls(r) if c.request.action == "ec2:DescribeLaunchTemplateVersions"
             and "launch-template/" in c.request.resource]
    assert len(calls) == 1 and workloads.denials(calls) == []
    denied = [workloads.Call(c.workload, c.source, c.request, ()) for c in calls]  # a role without the read
    [denial] = workloads.denials(denied)
    assert "getInstanceTypeByLaunchTemplate" in denial.line()


@pytest.fixture(scope="module")
def block_template():
    from tests.conftest import CAPACITY_BLOCK, UNDER_MUTATION, template_for

    if UNDER_MUTATION:
        pytest.skip("no synthesis under mutation testing")
    return template_for(**CAPACITY_BLOCK).to_json()
