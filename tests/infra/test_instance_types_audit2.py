"""The hourly prices of what is not an instance, as AWS publishes them (us-east-2 list prices): the review's idle
cost and the watch's 'still billed' line add them up."""

import pytest

from cdk_constructs import instance_types as it


@pytest.mark.parametrize("name, usd_per_hour", [
    ("EKS_CONTROL_PLANE_USD_PER_HOUR", 0.10),      # Amazon EKS pricing: $0.10 per cluster-hour, standard support
    ("NAT_GATEWAY_USD_PER_HOUR", 0.045),           # Amazon VPC pricing: NAT gateway, per hour
    ("INTERFACE_ENDPOINT_USD_PER_AZ_HOUR", 0.01),  # AWS PrivateLink pricing: per VPC endpoint per AZ, per hour
])
def test_each_fixed_hourly_price_is_the_published_one(name, usd_per_hour):
    assert getattr(it, name) == usd_per_hour
