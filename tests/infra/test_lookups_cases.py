"""stacks/lookups.py case by case: which cached entry of cdk.context.json each capacity type reads, an offering
cached without zones, and the spot price of the GPU zone when that is not the VPC's first zone."""

from __future__ import annotations

import pytest

from stacks.context import settings_from_context
from stacks.lookups import offering_problem, price_basis, resolve_gpu_zone
from tests.conftest import base_context

# Two rankings that differ: preflight ranks spot zones by placement score and on-demand ones by probe.
RANKINGS = {"gpu-zones:us-east-2:g6.12xlarge:on-demand": {"zones": ["us-east-2a"], "basis": "probe"},
            "gpu-zones:us-east-2:g6.12xlarge:spot": {"zones": ["us-east-2b"], "basis": "placement score"},
            "gpu-zones:us-east-2:p5.48xlarge:on-demand": {"zones": ["us-east-2c"], "basis": "probe"}}


def settings(resolve: bool = True, **overrides):
    return settings_from_context(base_context() | {"availability_zones": ["us-east-2a", "us-east-2b", "us-east-2c"],
                                                   "nat_gateways": 1} | overrides, resolve_lookups=resolve)


@pytest.mark.parametrize("overrides,zone", [
    ({"gpu_capacity_type": "on-demand"}, "us-east-2a"),
    ({"gpu_capacity_type": "spot"}, "us-east-2b"),
    ({"gpu_instance_type": "p5.48xlarge"}, "us-east-2c"),
])
def test_auto_reads_the_ranking_of_its_own_instance_and_capacity_type(overrides, zone):
    unresolved = settings(resolve=False, gpu_availability_zone="auto", **overrides)
    assert resolve_gpu_zone(unresolved, RANKINGS).gpu_availability_zone == zone


def test_a_named_zone_is_kept_whatever_the_ranking():
    named = settings(resolve=False, gpu_availability_zone="us-east-2c")
    assert resolve_gpu_zone(named, RANKINGS).gpu_availability_zone == "us-east-2c"


def test_an_offering_cached_without_zones_refuses_no_zone():
    # An entry whose zone list is empty says nothing about zones (preflight asks EC2 itself).
    cached = {"instance-type-offerings:us-east-2:g6.12xlarge": {"usage_classes": ["on-demand", "spot"], "zones": []}}
    assert offering_problem(settings(gpu_availability_zone="us-east-2c"), cached) is None


def test_an_offering_of_another_instance_type_is_not_read():
    cached = {"instance-type-offerings:us-east-2:p5.48xlarge": {"usage_classes": ["on-demand"], "zones": ["us-east-2c"]}}
    assert offering_problem(settings(gpu_capacity_type="spot"), cached) is None
    assert offering_problem(settings(gpu_instance_type="p5.48xlarge", gpu_capacity_type="spot"), cached).startswith(
        "gpu_capacity_type: p5.48xlarge cannot be bought as spot in us-east-2 (EC2 offers it as on-demand;")


def test_spot_is_priced_in_the_gpu_zone_not_the_vpcs_first():
    # 1.2 / 4.6016 (g6.12xlarge on-demand) = 26 %.
    context = {"spot-price:us-east-2:g6.12xlarge": {"zones": {"us-east-2a": 1.4, "us-east-2b": 1.2}, "as_of": "2026-12-01"}}
    priced = price_basis(settings(gpu_capacity_type="spot", gpu_availability_zone="us-east-2b"), context)
    assert (priced.usd_per_hour, priced.moves) == (1.2, True)
    assert priced.basis.startswith("spot price in us-east-2b as of 2026-12-01 (26% of on-demand;")
