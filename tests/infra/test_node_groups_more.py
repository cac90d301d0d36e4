"""cdk_constructs/node_groups.py's launch template data for each way of buying GPU capacity, as EC2 and EKS read it,
without a synthesis."""

from __future__ import annotations

import pytest

from cdk_constructs.node_groups import launch_template_data

# IMDSv2 only, one hop: a container one network hop away (any pod off the host network) gets no answer from the
# instance metadata service, so it cannot take the node role (EC2 User Guide, "Configure the instance metadata
# options": HttpPutResponseHopLimit; EKS Best Practices, "Restrict access to the instance profile").
IMDS = {"HttpTokens": "required", "HttpPutResponseHopLimit": 1, "HttpEndpoint": "enabled"}


@pytest.mark.parametrize("disk_gib", [80, 200])
def test_a_plain_template_is_imdsv2_at_one_hop_and_an_encrypted_gp3_root_volume_of_the_size_given(disk_gib):
    assert launch_template_data(disk_gib) == {
        "MetadataOptions": IMDS,
        "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": disk_gib, "VolumeType": "gp3",
                                                                     "Encrypted": True, "DeleteOnTermination": True}}]}


def test_an_on_demand_reservation_is_targeted_without_buying_from_a_capacity_block():
    data = launch_template_data(200, capacity_reservation_id="cr-0123456789abcdef0")
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}
    assert "InstanceMarketOptions" not in data and "InstanceType" not in data


def test_a_capacity_block_buys_from_the_block_and_names_its_type_in_the_template():
    # EKS User Guide, "Create a managed node group with Capacity Blocks for ML": MarketType capacity-block, the
    # block as the reservation target, and the instance type in the launch template.
    data = launch_template_data(200, capacity_reservation_id="cr-0123456789abcdef0",
                                capacity_block_instance_type="p5.48xlarge")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["InstanceType"] == "p5.48xlarge"
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": "cr-0123456789abcdef0"}


def test_the_placement_group_and_interfaces_go_in_as_given_and_only_when_given():
    interfaces = [{"DeviceIndex": 0, "NetworkCardIndex": 0, "InterfaceType": "efa"}]
    data = launch_template_data(200, network_interfaces=interfaces, placement_group_name="pg-1")
    assert data["Placement"] == {"GroupName": "pg-1"} and data["NetworkInterfaces"] == interfaces
    bare = launch_template_data(200, network_interfaces=[], placement_group_name=None)
    assert "Placement" not in bare and "NetworkInterfaces" not in bare
