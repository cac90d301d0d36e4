"""cdk_constructs/network.py: the GPU nodes' subnet is the one private subnet of their AZ."""

from __future__ import annotations

import pytest

from tests.conftest import UNDER_MUTATION

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="aws-cdk-lib constructs need jsii")


@pytest.fixture(scope="module")
def network():
    import aws_cdk as cdk

    from cdk_constructs.network import Network, NetworkProps

    stack = cdk.Stack(cdk.App(), "Net")
    return Network(stack, "Network", NetworkProps(availability_zones=("us-east-2a", "us-east-2b"), cidr="10.0.0.0/20"))


@pytest.mark.parametrize("zone", ["us-east-2a", "us-east-2b"])
def test_each_az_of_the_vpc_has_its_one_private_subnet(network, zone):
    subnet = network.private_subnet_in(zone)
    assert subnet.availability_zone == zone
    assert subnet.node.path in [s.node.path for s in network.vpc.private_subnets]


def test_an_az_the_vpc_lacks_is_refused_with_the_count_found(network):
    # gpu_availability_zone outside availability_zones: no subnet to place the GPU nodes in.
    with pytest.raises(ValueError, match=r"^expected one private subnet in us-east-2c, found 0$"):
        network.private_subnet_in("us-east-2c")
