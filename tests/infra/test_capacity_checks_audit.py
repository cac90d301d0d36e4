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


def test_a_fresh_ranking_without_a_zone_of_the_vpc_is_a_warning_not_agreement():
    # The kept zone us-east-2a (in the VPC's a, b) against a fresh ranking of us-east-2c alone: the fresh check would
    # give auto no zone at all, which the user must hear of.
    from tools.verdicts import WARN

    s = settings("gpu_availability_zone=auto")
    held = {"zones": ["us-east-2a"], "basis": "probe", "as_of": "2026-12-01T09:00:00Z"}
    check = capacity._auto_zone(s, "zones", ["us-east-2c"], held, "gpu-zones:us-east-2:g6.12xlarge:on-demand")
    assert check.verdict == WARN
    assert "auto keeps us-east-2a" in check.reason and "a fresh check ranks no zone of availability_zones first" in check.reason
