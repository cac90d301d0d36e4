"""stacks/lookups.py: auto's zone when the first ranked is not in the VPC, its refusals, and each capacity type's
price basis (worked examples; g6.12xlarge on demand is $4.6016 an hour)."""

from __future__ import annotations

import pytest

from stacks.lookups import price_basis, resolve_gpu_zone
from stacks.settings import SettingsError
from tests.infra.test_lookups_cases import settings

KEY = "gpu-zones:us-east-2:g6.12xlarge:on-demand"


def test_auto_takes_the_best_ranked_zone_the_vpc_has():
    # us-east-2d ranks first but the VPC (a, b, c) has no subnet there.
    ranked = {KEY: {"zones": ["us-east-2d", "us-east-2b", "us-east-2a"], "basis": "probe"}}
    assert resolve_gpu_zone(settings(resolve=False, gpu_availability_zone="auto"), ranked).gpu_availability_zone == \
        "us-east-2b"


@pytest.mark.parametrize("context,refusal", [
    ({}, "run make preflight"),
    ({KEY: {"zones": []}}, "run make preflight"),
    ({KEY: {"zones": ["us-east-2d"], "basis": "probe"}}, r"are not in availability_zones \['us-east-2a', 'us-east-2b', "
                                                         r"'us-east-2c'\]; add one of them there"),
])
def test_auto_without_a_usable_ranking_is_refused_naming_what_to_do(context, refusal):
    with pytest.raises(SettingsError, match=f"^gpu_availability_zone: auto.*{refusal}"):
        resolve_gpu_zone(settings(resolve=False, gpu_availability_zone="auto"), context)


@pytest.mark.parametrize("overrides,usd,moves", [
    ({}, 4.6016, False),  # the on-demand list price
    ({"gpu_capacity_type": "spot"}, 4.6016, True),  # no spot price cached: spot's default maximum, the on-demand price
    ({"gpu_capacity_type": "capacity-block", "capacity_reservation_id": "cr-0123456789abcdef0",
      "gpu_availability_zone": "us-east-2a"}, 0.0, False),  # paid upfront with the block
])
def test_each_capacity_type_is_priced_on_its_own_basis(overrides, usd, moves):
    priced = price_basis(settings(**overrides), {})
    assert (priced.usd_per_hour, priced.moves) == (usd, moves)
    assert priced.as_metadata() == {"usd_per_hour": usd, "basis": priced.basis, "moves": moves}
