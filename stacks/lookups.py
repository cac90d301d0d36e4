"""Capacity facts looked up in an AWS account and cached in cdk.context.json, the way CDK caches its own lookups:
`make preflight` (tools/preflight.py) writes them with the user's credentials; synth reads them and needs none.
`cdk context --reset <key>` (or deleting the entry) makes the next preflight look again.

Keys, in CDK's `provider:parameters` form (CDK passes every key of cdk.context.json to the app as context; keys
with ':' are not settings):

- `instance-type-offerings:<region>:<type>`: {"usage_classes": [...], "zones": [...], "as_of": ...}: EC2
  DescribeInstanceTypes' SupportedUsageClasses (on-demand, spot, capacity-block) and DescribeInstanceTypeOfferings'
  availability zones. Synth refuses a capacity type or zone the cached offering does not have.
- `spot-price:<region>:<type>`: {"zones": {zone: usd per hour}, "as_of": ...}: the newest Linux/UNIX price per
  zone from DescribeSpotPriceHistory. The review prices spot nodes at it, labelled as a price that moves.
- `gpu-zones:<region>:<type>:<capacity type>`: {"zones": [...], "basis": ..., "as_of": ...}: the zones preflight
  found with capacity, best first. `gpu_availability_zone=auto` takes the first that the VPC has. Written once and
  kept, as CDK keeps its own lookups until reset: the node group's Subnets, CapacityType and InstanceTypes are
  create-only (AWS::EKS::Nodegroup), so a zone that moved between deploys would replace the GPU node group under a
  running job. A later preflight that ranks another zone first warns and keeps it; `make preflight REFRESH=1` (or
  `cdk context --reset <key>`) ranks again. A Capacity Block's entry is the block's zone, always read afresh.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

from cdk_constructs.instance_types import CAPACITY_TYPES, INSTANCE_TYPES, PRICES_AS_OF
from stacks.settings import Settings, SettingsError

if typing.TYPE_CHECKING:
    from pathlib import Path

__all__ = ["CAPACITY_TYPES", "AUTO_ZONE", "PriceBasis", "offering_problem", "price_basis", "resolve_gpu_zone", "save"]

AUTO_ZONE = "auto"


def offerings_key(region: str, instance_type: str) -> str:
    return f"instance-type-offerings:{region}:{instance_type}"


def spot_price_key(region: str, instance_type: str) -> str:
    return f"spot-price:{region}:{instance_type}"


def gpu_zones_key(region: str, instance_type: str, capacity_type: str) -> str:
    return f"gpu-zones:{region}:{instance_type}:{capacity_type}"


def _preflight_command(s: Settings) -> str:
    return (f'make preflight CDK_ARGS="-c gpu_capacity_type={s.gpu_capacity_type} -c gpu_instance_type='
            f'{s.gpu_instance_type} -c gpu_availability_zone=auto"')


def resolve_gpu_zone(s: Settings, context: typing.Mapping[str, typing.Any]) -> Settings:
    """Settings whose gpu_availability_zone `auto` is the first zone with capacity that preflight cached and the VPC
    has (availability_zones); SettingsError in one line when there is no such entry or zone."""
    if s.gpu_availability_zone != AUTO_ZONE:
        return s
    key = gpu_zones_key(s.region, s.gpu_instance_type, s.gpu_capacity_type)
    entry = context.get(key)
    if not isinstance(entry, dict) or not entry.get("zones"):
        raise SettingsError(f"gpu_availability_zone: auto takes the first zone preflight found with capacity, and "
                            f"cdk.context.json has no {key!r}: run {_preflight_command(s)} (PROBE=1 also probes "
                            "on-demand capacity), or name a zone")
    usable = [zone for zone in entry["zones"] if zone in s.availability_zones]
    if not usable:
        raise SettingsError(f"gpu_availability_zone: auto: the zones with capacity ({', '.join(entry['zones'])}, "
                            f"{entry.get('basis', 'cached')} {entry.get('as_of', '')}) are not in availability_zones "
                            f"{list(s.availability_zones)}; add one of them there")
    return dataclasses.replace(s, gpu_availability_zone=usable[0])


def offering_problem(s: Settings, context: typing.Mapping[str, typing.Any]) -> str | None:
    """Why the cached offering of the GPU type in the region cannot be bought as the settings ask, or None (also when
    nothing is cached: preflight asks EC2 itself)."""
    key = offerings_key(s.region, s.gpu_instance_type)
    entry = context.get(key)
    if not isinstance(entry, dict):
        return None
    classes = entry.get("usage_classes") or []
    if s.gpu_capacity_type not in classes:
        return (f"gpu_capacity_type: {s.gpu_instance_type} cannot be bought as {s.gpu_capacity_type} in {s.region} "
                f"(EC2 offers it as {', '.join(classes) or 'nothing'}; {key} in cdk.context.json, "
                f"{entry.get('as_of', 'cached')}); use one of those or another gpu_instance_type")
    zones = entry.get("zones") or []
    if s.gpu_availability_zone != AUTO_ZONE and zones and s.gpu_availability_zone not in zones:
        return (f"gpu_availability_zone: {s.gpu_instance_type} is not offered in {s.gpu_availability_zone} "
                f"(EC2 offers it in {', '.join(zones)}; {key} in cdk.context.json); use one of those")
    return None


@dataclass(frozen=True)
class PriceBasis:
    """What one GPU node costs per hour as the synth prices it, and where that figure comes from."""

    usd_per_hour: float
    basis: str
    moves: bool
    """A market price (spot) that changes after the synth."""

    def as_metadata(self) -> dict:
        return {"usd_per_hour": self.usd_per_hour, "basis": self.basis, "moves": self.moves}


def price_basis(s: Settings, context: typing.Mapping[str, typing.Any]) -> PriceBasis:
    """The GPU node's hourly price for the review and the per-run estimate: the on-demand list price; for spot the
    cached spot price of the GPU zone (EC2's default maximum price for spot is the on-demand price, so without a cache
    that is the ceiling used); for a Capacity Block nothing per hour: the block is paid for when bought (EC2 User
    Guide, "Capacity Blocks pricing and billing")."""
    on_demand = INSTANCE_TYPES[s.gpu_instance_type].usd_per_hour
    if s.gpu_capacity_type == "capacity-block":
        return PriceBasis(0.0, f"Capacity Block {s.capacity_reservation_id}: paid upfront when bought, no hourly charge "
                               "for its instances; they end with the block, and EKS scales the group to 0 40 min before "
                               "(make preflight warns when the job would not fit)", False)
    if s.gpu_capacity_type == "on-demand":
        return PriceBasis(on_demand, f"on-demand list price ({PRICES_AS_OF})", False)
    key = spot_price_key(s.region, s.gpu_instance_type)
    entry = context.get(key) or {}
    price = (entry.get("zones") or {}).get(s.gpu_availability_zone)
    if price is None:
        return PriceBasis(on_demand, f"spot price not cached ({key}; make preflight caches it): priced at the "
                                     "on-demand price, spot's default maximum; it moves", True)
    return PriceBasis(float(price), f"spot price in {s.gpu_availability_zone} as of {entry.get('as_of', '?')} "
                                    f"({float(price) / on_demand:.0%} of on-demand; cached in cdk.context.json); it moves",
                      True)


def save(entries: dict, context_file: "Path") -> None:
    """Add looked-up entries to cdk.context.json, keeping what CDK and the planner cached there."""
    from planning.model_config import save as save_context

    save_context(entries, context_file)
