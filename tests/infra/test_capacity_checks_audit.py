"""tools/capacity_checks.py check_zones: the region's zones that do not offer the GPU type are named."""

from __future__ import annotations

from tests.infra.test_capacity_checks_cases import Block
from tests.infra.test_capacity_preflight import settings
from tools import capacity_checks as capacity
from tools.verdicts import PASS


def test_the_zones_of_the_region_that_do_not_offer_the_type_are_named():
    # The region has a, b and c (DescribeAvailabilityZones); the offering (DescribeInstanceTypeOfferings) a and b.
    s = settings()
    cache = {"instance-type-offerings:us-east-2:g6.12xlarge": {"usage_classes": ["on-demand"],
                                                               "zones": ["us-east-2a", "us-east-2b"]}}
    check = capacity.check_zones(Block("none"), s, cache)
    assert check.verdict == PASS
    assert check.reason.endswith("offered in us-east-2a, us-east-2b (capacity not probed: PROBE=1 probes it); "
                                 "not offered in us-east-2c")
