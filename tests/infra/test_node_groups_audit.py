"""cdk_constructs/node_groups.py: the GPU group carries the price the synth priced it at, for the review and the
measured bill (tools/review.py node_price), on the default template and on CHANGED's spot."""

from __future__ import annotations

import pytest

from cdk_constructs.instance_types import PRICE_METADATA
from tests.conftest import UNDER_MUTATION, resources_of
from tests.infra.test_stack_settings_reach_the_template import changed  # noqa: F401 - its fixture

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def _groups(template) -> dict[str, dict]:
    return {r["Properties"]["Labels"]["role"]: r for r in resources_of(template, "AWS::EKS::Nodegroup").values()}


def test_only_the_gpu_group_carries_its_on_demand_list_price(template):
    groups = _groups(template)
    # g6.12xlarge on demand in us-east-2: $4.6016 an hour (AWS's on-demand price list).
    assert groups["gpu-worker"]["Metadata"][PRICE_METADATA]["usd_per_hour"] == 4.6016
    assert groups["gpu-worker"]["Metadata"][PRICE_METADATA]["moves"] is False
    assert PRICE_METADATA not in groups["system"].get("Metadata", {})


def test_a_spot_group_carries_the_cached_spot_price_of_its_zone_which_moves(changed):  # noqa: F811
    # CHANGED's LOOKUPS cache $1.7124 for us-west-2c, the zone auto took (us-west-2d first is not in the VPC).
    price = _groups(changed)["gpu-worker"]["Metadata"][PRICE_METADATA]
    assert price["usd_per_hour"] == 1.7124 and price["moves"] is True
