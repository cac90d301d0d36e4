"""stacks/lookups.py: the spot price of the GPU's own zone, and an offering cached with no usage class."""

from __future__ import annotations

import pytest

from stacks.lookups import offering_problem, price_basis
from tests.infra.test_lookups_cases import settings

SPOT_PRICES = {"spot-price:us-east-2:g6.12xlarge": {"zones": {"us-east-2a": 1.8406, "us-east-2b": 1.3805,
                                                              "us-east-2c": 2.3008}, "as_of": "2026-12-01T09:00:00Z"}}


# The GPU nodes run in gpu_availability_zone only: the price of a cheaper zone is not what they cost.
# 1.8406 / 4.6016 (g6.12xlarge on demand) = 40%; 2.3008 / 4.6016 = 50%.
@pytest.mark.parametrize("zone, usd, share", [("us-east-2a", 1.8406, "40%"), ("us-east-2c", 2.3008, "50%")])
def test_spot_is_priced_at_the_cached_price_of_the_gpu_zone(zone, usd, share):
    priced = price_basis(settings(gpu_capacity_type="spot", gpu_availability_zone=zone), SPOT_PRICES)
    assert (priced.usd_per_hour, priced.moves) == (usd, True)
    assert priced.basis == (f"spot price in {zone} as of 2026-12-01T09:00:00Z ({share} of on-demand; cached in "
                            "cdk.context.json); it moves")


def test_a_cached_offering_without_usage_classes_refuses_every_capacity_type():
    # DescribeInstanceTypes gives no SupportedUsageClasses for a type the region does not sell.
    s = settings()
    context = {"instance-type-offerings:us-east-2:g6.12xlarge": {"usage_classes": [], "zones": []}}
    assert offering_problem(s, context) == (
        "gpu_capacity_type: g6.12xlarge cannot be bought as on-demand in us-east-2 (EC2 offers it as nothing; "
        "instance-type-offerings:us-east-2:g6.12xlarge in cdk.context.json, cached); use one of those or another "
        "gpu_instance_type")
