"""cdk_constructs/node_groups.py: the GPU node group refuses what it cannot build, before any node is asked for."""

from __future__ import annotations

import types

import pytest

from tests.conftest import UNDER_MUTATION

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="aws-cdk-lib constructs need jsii")


def _cluster():
    """What GpuNodeGroup reads of the cluster before its launch template: the VPC and the cluster's security group."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    stack = cdk.Stack(cdk.App(), "Nodes")
    return stack, types.SimpleNamespace(vpc=ec2.Vpc(stack, "Vpc", max_azs=1), cluster_security_group_id="sg-0123")


# g4dn.xlarge is in the instance table with no EFA interface; x9.huge is in no table.
@pytest.mark.parametrize("instance_type", ["g4dn.xlarge", "x9.huge"])
def test_a_gpu_type_without_efa_is_refused(instance_type):
    from cdk_constructs.node_groups import GpuNodeGroup, GpuNodeGroupProps

    stack, cluster = _cluster()
    with pytest.raises(ValueError, match=rf"^gpu instance type '{instance_type}': not an EFA type in the instance table$"):
        GpuNodeGroup(stack, "Gpu", GpuNodeGroupProps(cluster=cluster, subnet=None, instance_type=instance_type))


def test_a_capacity_block_group_without_its_reservation_id_is_refused():
    # EC2 launches Capacity Block instances only into the reservation (capacity-reservation-specification).
    from cdk_constructs.node_groups import GpuNodeGroup, GpuNodeGroupProps

    stack, cluster = _cluster()
    with pytest.raises(ValueError, match=r"^GPU node group: a capacity-block group needs the Capacity Block's reservation id$"):
        GpuNodeGroup(stack, "Gpu", GpuNodeGroupProps(cluster=cluster, subnet=None, instance_type="p5.48xlarge",
                                                     capacity_type="capacity-block"))
