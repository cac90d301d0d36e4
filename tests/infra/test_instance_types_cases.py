"""cdk_constructs/instance_types.py case by case: the vCPU quota each type counts against (on-demand and spot), the
EFA interfaces of a GPU node's launch template, the room a Ray worker pod leaves the node, and the capacity types EKS
takes. Each expected value is worked out by hand or read from AWS's documentation."""

from __future__ import annotations

import dataclasses

import pytest

from cdk_constructs.instance_types import (CAPACITY_TYPES, INSTANCE_TYPES, SPOT_VCPU_QUOTAS, VCPU_QUOTAS,
                                           efa_network_interfaces, vcpu_quota_class, worker_pod_resources)


# Amazon EC2 User Guide, "Amazon EC2 instance type quotas": on-demand P families share one quota; spot splits them
# into P2/P3/P4 and P5, and names no P6 quota. G and VT share one quota on both markets.
@pytest.mark.parametrize("instance_type,spot,quota_class", [
    ("p5.48xlarge", True, "p5"), ("p5en.48xlarge", True, "p5"), ("p4d.24xlarge", True, "p2-p4"),
    ("p3.16xlarge", True, "p2-p4"), ("p2.xlarge", True, "p2-p4"), ("p6-b200.48xlarge", True, None),
    ("p5.48xlarge", False, "p"), ("p4d.24xlarge", False, "p"), ("p6-b200.48xlarge", False, "p"),
    ("g6.12xlarge", True, "g"), ("vt1.3xlarge", True, "g"), ("m7i.xlarge", True, "standard"),
    ("inf2.xlarge", True, None), ("dl1.24xlarge", False, None), ("hpc7g.16xlarge", False, None),
    ("f1.2xlarge", False, None), ("x2idn.16xlarge", True, None), ("z1d.large", False, "standard"),
    ("h1.2xlarge", False, "standard"), ("G6.12XLARGE", False, "g"),
])
def test_each_family_counts_against_its_markets_quota(instance_type, spot, quota_class):
    assert vcpu_quota_class(instance_type, spot=spot) == quota_class


def test_the_quota_codes_are_the_ones_service_quotas_names():
    # Service Quotas, service ec2: the codes of the quota tables of "Amazon EC2 instance type quotas".
    assert {k: code for k, (code, _) in VCPU_QUOTAS.items()} == {
        "g": "L-DB2E81BA", "p": "L-417A185B", "standard": "L-1216C47A"}
    assert {k: code for k, (code, _) in SPOT_VCPU_QUOTAS.items()} == {
        "g": "L-3819A6DF", "p2-p4": "L-7212CCBC", "p5": "L-C4BD4855", "standard": "L-34B43A08"}


def test_every_capacity_type_is_the_one_eks_takes():
    # AWS::EKS::Nodegroup CapacityType: ON_DEMAND, SPOT or CAPACITY_BLOCK.
    assert CAPACITY_TYPES == {"on-demand": "ON_DEMAND", "spot": "SPOT", "capacity-block": "CAPACITY_BLOCK"}


def test_a_p5_node_gets_efa_on_card_0_and_efa_only_on_each_further_card():
    # EC2 User Guide, multiple network cards: the primary interface is card 0 device 0; every further EFA-only
    # interface takes its own card, at device index 0. p5.48xlarge has 32 network cards.
    interfaces = efa_network_interfaces(INSTANCE_TYPES["p5.48xlarge"], ["sg-cluster", "sg-efa"])
    assert len(interfaces) == 32
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(32))
    assert [i["InterfaceType"] for i in interfaces] == ["efa"] + ["efa-only"] * 31
    assert {i["DeviceIndex"] for i in interfaces} == {0}
    assert all(i["Groups"] == ["sg-cluster", "sg-efa"] and i["DeleteOnTermination"] is True for i in interfaces)
    assert all("SubnetId" not in i for i in interfaces)  # the node group names the subnet


def test_a_g6_node_gets_one_efa_interface_with_both_security_groups():
    assert efa_network_interfaces(INSTANCE_TYPES["g6.12xlarge"], ["sg-cluster", "sg-efa"]) == [
        {"DeviceIndex": 0, "NetworkCardIndex": 0, "InterfaceType": "efa", "Groups": ["sg-cluster", "sg-efa"],
         "DeleteOnTermination": True}]


def node(vcpus: int, memory_gib: int):
    return dataclasses.replace(INSTANCE_TYPES["g6.12xlarge"], vcpus=vcpus, memory_gib=memory_gib)


# A sixth of the cores (at least 2) and of the memory (at least 8 GiB) stay with the node; 20 cores or more round
# down to tens, and so do 100 GiB or more. Worked by hand:
@pytest.mark.parametrize("vcpus,memory_gib,cpu,memory", [
    (48, 192, 40, 160),     # g6.12xlarge: 48 - 8, 192 - 32: the reference deployment's 40 CPU / 160 GiB
    (192, 2048, 160, 1700),  # p5.48xlarge: 192 - 32; 2048 - 341 = 1707, rounded down to 1700
    (8, 32, 6, 24),         # 8 // 6 = 1 < 2 keeps 2 cores back; 32 // 6 = 5 < 8 keeps 8 GiB back
    (22, 118, 19, 99),      # 22 - 3 = 19 cores and 118 - 19 = 99 GiB: below 20 and 100, not rounded
    (25, 121, 20, 100),     # 25 - 4 = 21 cores rounds to 20; 121 - 20 = 101 GiB rounds to 100
])
def test_a_worker_pod_leaves_the_node_its_share(vcpus, memory_gib, cpu, memory):
    assert worker_pod_resources(node(vcpus, memory_gib)) == {"cpu": cpu, "memory_gib": memory}
