"""EKS's and EC2's side of the seam: how a managed node group buys its instances, as the launch template and the
node group together say it.

- A Capacity Block (EKS User Guide, "Create a managed node group with Capacity Blocks for ML"): the node group's
  capacityType is CAPACITY_BLOCK, and its launch template holds InstanceMarketOptions MarketType capacity-block, a
  CapacityReservationTarget naming the block, and the InstanceType; "If the capacity type isn't set to
  CAPACITY_BLOCK or any of the other above required launch template values are missing, then the create request
  will be rejected". Its subnets are in the block's Availability Zone only (same page; EC2 User Guide, "Launch
  instances using Capacity Blocks": an instance can't launch in a subnet of another zone).
- An instance type in the launch template excludes InstanceTypes on the node group (EKS User Guide, "Customize
  managed nodes with launch templates": "If you specify an instance type in a launch template ... you can't specify
  any instance types" through the EKS API), and a node group with neither gets t3.medium.
- Spot (EKS User Guide, "Managed node group capacity types"): EKS makes the Auto Scaling group buy spot, and "Don't
  pass a single instance type through the launch template"; a Capacity Reservation holds On-Demand capacity (EC2
  User Guide, "On-Demand Capacity Reservations"), so a spot group targets none.
- CapacityReservationSpecification (EC2 API Reference): a CapacityReservationPreference beside a
  CapacityReservationTarget must be capacity-reservations-only.
- A targeted reservation launches only into the cluster placement group it was created in (EC2 User Guide,
  "Capacity Reservations for cluster placement groups"); the stack's placement groups are new, so none was made in
  one, and a Capacity Block's instances are placed by EC2 (EC2 API Reference, CapacityBlock: "automatically placed
  close together inside Amazon EC2 UltraClusters").
"""

from __future__ import annotations

from tools.seams.cfn import Resolver
from tools.seams.node import launch_template_of

CAPACITY_BLOCK_MARKET = "capacity-block"
ONLY_RESERVATIONS = "capacity-reservations-only"


def _subnet_zones(r: Resolver, subnets: list) -> set:
    zones = set()
    for subnet in subnets:
        logical_id = subnet.get("Ref") if isinstance(subnet, dict) else None
        raw = r.resources.get(logical_id, {}).get("Properties", {}).get("AvailabilityZone")
        zones.add(raw if isinstance(raw, str) else f"<zone of {logical_id or subnet}>")
    return zones


def _created_placement_group(r: Resolver, template_id: str) -> bool:
    """The launch template's placement group is one the stack creates (its name a Ref to it, unresolved)."""
    raw = r.resources.get(template_id, {}).get("Properties", {}).get("LaunchTemplateData", {})
    group = (raw.get("Placement") or {}).get("GroupName")
    return isinstance(group, dict) and r.resources.get(group.get("Ref"), {}).get("Type") == "AWS::EC2::PlacementGroup"


def nodegroup_problems(r: Resolver, lid: str) -> list[str]:
    raw = r.resources[lid].get("Properties", {})
    capacity = raw.get("CapacityType", "ON_DEMAND")
    template = launch_template_of(r, lid)
    template_id, data = template if template else ("(none)", {})
    market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
    reservation = data.get("CapacityReservationSpecification") or {}
    target = (reservation.get("CapacityReservationTarget") or {})
    targeted = bool(target.get("CapacityReservationId") or target.get("CapacityReservationResourceGroupArn"))
    found = []
    where = f"capacity: {lid} ({capacity}, launch template {template_id})"
    if data.get("InstanceType") and raw.get("InstanceTypes"):
        found.append(f"{where}: an instance type in both the launch template and InstanceTypes; EKS refuses the group")
    if not data.get("InstanceType") and not raw.get("InstanceTypes"):
        found.append(f"{where}: no instance type in the launch template or InstanceTypes; EKS launches t3.medium")
    if capacity == "CAPACITY_BLOCK":
        if market != CAPACITY_BLOCK_MARKET:
            found.append(f"{where}: a Capacity Block group's launch template needs InstanceMarketOptions MarketType "
                         f"capacity-block, it has {market or 'none'}; EKS rejects the create")
        if not target.get("CapacityReservationId"):
            found.append(f"{where}: a Capacity Block group's launch template needs CapacityReservationTarget "
                         "CapacityReservationId, the block; EKS rejects the create")
        if not data.get("InstanceType"):
            found.append(f"{where}: a Capacity Block group's launch template needs its InstanceType; EKS rejects "
                         "the create")
        zones = _subnet_zones(r, raw.get("Subnets") or [])
        if len(zones) != 1:
            found.append(f"{where}: a Capacity Block's instances launch in its one zone; the group's subnets are in "
                         f"{', '.join(sorted(zones)) or 'none'}")
    elif market == CAPACITY_BLOCK_MARKET:
        found.append(f"{where}: the launch template buys from a Capacity Block, the group's capacityType is {capacity}; "
                     "EKS rejects the create unless it is CAPACITY_BLOCK")
    if capacity == "SPOT":
        if market:
            found.append(f"{where}: a spot group's launch template sets InstanceMarketOptions {market}; EKS buys spot "
                         "through the group, the template asks for no market")
        if targeted:
            found.append(f"{where}: a spot group targets a Capacity Reservation, which holds On-Demand capacity")
        if data.get("InstanceType"):
            found.append(f"{where}: a spot group names its instance type in the launch template; EKS wants it in "
                         "InstanceTypes")
    preference = reservation.get("CapacityReservationPreference")
    if targeted and preference not in (None, ONLY_RESERVATIONS):
        found.append(f"{where}: CapacityReservationPreference {preference} beside a CapacityReservationTarget; EC2 "
                     f"takes both only with {ONLY_RESERVATIONS}")
    if targeted and _created_placement_group(r, template_id):
        found.append(f"{where}: targets a reservation and launches into the stack's new cluster placement group; a "
                     "reservation launches only into the group it was created in")
    return found


def problems(r: Resolver) -> list[str]:
    found = []
    for lid, resource in r.resources.items():
        if resource["Type"] == "AWS::EKS::Nodegroup":
            found += nodegroup_problems(r, lid)
    return found
