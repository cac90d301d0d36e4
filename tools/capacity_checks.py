"""Preflight's capacity checks: can the GPU type be bought the way the settings ask, in which zones, at what spot
price, and does a Capacity Block fit the job. What they learn is cached for synth (stacks/lookups.py).

PROBE=1 (`--probe`) asks EC2 for capacity the way AWS's own sample does: an On-Demand Capacity Reservation of
gpu_node_count instances (the job's nodes, all in one zone) per candidate zone, cancelled at once. A reservation bills
per second at the on-demand rate while it exists (EC2 User Guide, "Capacity Reservation pricing and billing"), so the
probe says what it may cost before it starts, and cancels every reservation it made whatever stops it (an error,
Ctrl-C): see probe_zones. It is preflight's only write: it needs ec2:CreateCapacityReservation,
ec2:CancelCapacityReservation and ec2:CreateTags (the reservation is tagged as it is created).

The zones ranked for gpu_availability_zone=auto are cached once and kept (check_zones): the node group's Subnets,
CapacityType and InstanceTypes are create-only (AWS::EKS::Nodegroup), so a zone that moved between two deploys would
make CloudFormation replace the GPU node group under a running job. CDK's own context lookups are kept the same way
until reset; `make preflight REFRESH=1` (`--refresh`) ranks again.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
import typing
import uuid
from datetime import datetime, timedelta, timezone

from cdk_constructs.instance_types import INSTANCE_TYPES
from stacks.lookups import AUTO_ZONE, gpu_zones_key, offerings_key, spot_price_key
from stacks.settings import Settings
from tools.verdicts import FAIL, PASS, WARN, Check

# CreateCapacityReservation's answers that mean "no capacity there now" (EC2 API Reference, "Error codes").
NO_CAPACITY = {"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity"}
# ... and "not within your quota": a result of the probe too, not a capacity verdict.
OVER_QUOTA = {"InstanceLimitExceeded", "VcpuLimitExceeded", "ReservationCapacityExceeded"}
PROBE_TAG = "eks-fsdp-efa:capacity-probe"
LINUX = "Linux/UNIX"
# EKS User Guide, "Create a managed node group with Capacity Blocks for ML": EC2 starts shutting a block's instances
# down 30 minutes before its end, and EKS scales the node group to 0 40 minutes before it.
EKS_SCALE_DOWN_BEFORE_BLOCK_END = timedelta(minutes=40)
# EC2 User Guide, "Spot placement score", Limitations: asked for fewer than three instance types, EC2 returns a low
# score. Preflight asks for the one GPU type, so a score is read against the other zones' only (no absolute bar).
SINGLE_TYPE_SCORES = "scores for one instance type run low (EC2 User Guide, Spot placement score): only their order counts"
# botocore's EC2 model, CancelCapacityReservation: a reservation can be cancelled when assessing, scheduled (with a
# quote), active or delayed; not while pending. The probe waits a pending one out, a bounded while.
CANCELLABLE = frozenset({"assessing", "active", "delayed"})
SETTLE_POLLS, SETTLE_INTERVAL_S = 10, 3.0


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- what EC2 sells, and where


def offering(ec2, instance_type: str) -> dict:
    """The cache entry of instance-type-offerings: usage classes and the zones that offer the type."""
    info = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
    offerings = ec2.describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )["InstanceTypeOfferings"]
    return {"usage_classes": sorted(info.get("SupportedUsageClasses") or []),
            "zones": sorted({o["Location"] for o in offerings}), "as_of": _now()}


def check_capacity_type(ec2, s: Settings, cache: dict) -> Check:
    entry = offering(ec2, s.gpu_instance_type)
    cache[offerings_key(s.region, s.gpu_instance_type)] = entry
    if s.gpu_capacity_type in entry["usage_classes"]:
        return Check("capacity type", PASS, f"{s.gpu_instance_type} can be bought as {s.gpu_capacity_type} in {s.region}")
    return Check("capacity type", FAIL, f"{s.gpu_instance_type} cannot be bought as {s.gpu_capacity_type} in {s.region}: "
                 f"EC2 sells it as {', '.join(entry['usage_classes']) or 'nothing'}",
                 f"-c gpu_capacity_type=<{', '.join(entry['usage_classes'])}> or another gpu_instance_type")


def spot_prices(ec2, instance_type: str) -> dict[str, float]:
    """The newest Linux/UNIX spot price of each zone (DescribeSpotPriceHistory with StartTime now: the price in
    effect in each zone)."""
    newest: dict[str, tuple] = {}
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=[instance_type], ProductDescriptions=[LINUX], StartTime=datetime.now(timezone.utc))
    for page in pages:
        for price in page["SpotPriceHistory"]:
            zone, when = price["AvailabilityZone"], price["Timestamp"]
            if zone not in newest or when > newest[zone][0]:
                newest[zone] = (when, float(price["SpotPrice"]))
    return {zone: value for zone, (_, value) in sorted(newest.items())}


def spot_scores(ec2, s: Settings) -> dict[str, int] | None:
    """Zone -> spot placement score (1-10) for gpu_node_count nodes in one zone, or None where EC2 refuses the
    question (ec2:GetSpotPlacementScores is not in every read-only policy). One instance type: the scores run low
    (SINGLE_TYPE_SCORES), so they rank zones against each other only."""
    from botocore.exceptions import ClientError

    try:
        scores = ec2.get_spot_placement_scores(InstanceTypes=[s.gpu_instance_type], TargetCapacity=s.gpu_node_count,
                                               SingleAvailabilityZone=True, RegionNames=[s.region])["SpotPlacementScores"]
    except ClientError:
        return None
    names = {z["ZoneId"]: z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    return {names.get(score["AvailabilityZoneId"], score["AvailabilityZoneId"]): score["Score"] for score in scores}


# ---------------------------------------------------------------- the probe


def probe_cost_line(instance_type: str, zones: list[str], count: int = 1) -> str:
    price = INSTANCE_TYPES[instance_type].usd_per_hour if instance_type in INSTANCE_TYPES else None
    bound = (f"${len(zones) * count * price / 60:.2f} if each lived a minute" if price
             else "the type's on-demand rate per second")
    return (f"PROBE: creating and at once cancelling an On-Demand Capacity Reservation of {count} x {instance_type} "
            f"(gpu_node_count, in one zone) in each of {', '.join(zones)}; each bills per second at the on-demand rate "
            f"while it exists (seconds; up to {SETTLE_POLLS * SETTLE_INTERVAL_S:.0f} s while EC2 settles a pending one): "
            f"at most {bound}")


def _state(ec2, reservation_id: str) -> str:
    found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    return found[0]["State"] if found else "cancelled"


def _settled(ec2, reservation_id: str, state: str, sleep: typing.Callable[[float], None]) -> str:
    """The reservation's state once it has left pending (EC2 provisions it, or fails it), or pending after
    SETTLE_POLLS x SETTLE_INTERVAL_S."""
    for _ in range(SETTLE_POLLS):
        if state != "pending":
            return state
        sleep(SETTLE_INTERVAL_S)
        state = _state(ec2, reservation_id)
    return state


def probe_zones(ec2, instance_type: str, zones: list[str], count: int = 1, token: str | None = None,
                sleep: typing.Callable[[float], None] = time.sleep) -> dict[str, str | None]:
    """Zone -> None where a reservation of `count` instances became active (and was cancelled), else why not: EC2's
    error code, or the state the reservation reached instead (failed, still pending...).

    A created reservation is capacity only once active: one EC2 answers `pending` is waited for (it cannot be
    cancelled while pending), a bounded while, then cancelled. Cleanup is guaranteed: each reservation is cancelled
    as soon as it settles; the `finally` cancels any still listed, then every reservation tagged with this probe's
    token (one made by a call that an interruption cut off before its answer arrived), with Ctrl-C ignored meanwhile.
    An error other than no capacity or quota stops the probe (after the cleanup)."""
    from botocore.exceptions import ClientError

    token = token or uuid.uuid4().hex
    live: list[str] = []
    found: dict[str, str | None] = {}
    try:
        for zone in zones:
            try:
                made = ec2.create_capacity_reservation(
                    InstanceType=instance_type, InstancePlatform=LINUX, AvailabilityZone=zone, InstanceCount=count,
                    EndDateType="unlimited", InstanceMatchCriteria="targeted", ClientToken=f"{token}-{zone}",
                    TagSpecifications=[{"ResourceType": "capacity-reservation",
                                        "Tags": [{"Key": PROBE_TAG, "Value": token}]}])["CapacityReservation"]
            except ClientError as error:
                code = error.response["Error"]["Code"]
                if code not in NO_CAPACITY | OVER_QUOTA:
                    raise
                found[zone] = code
                continue
            live.append(made["CapacityReservationId"])
            state = _settled(ec2, live[-1], made.get("State", "pending"), sleep)
            if state in CANCELLABLE:
                ec2.cancel_capacity_reservation(CapacityReservationId=live[-1])
            if state != "pending":  # still pending: left to the cleanup, which waits again
                live.pop()
            found[zone] = None if state == "active" else f"reservation {state}"
    finally:
        _clean_up(ec2, live, token, sleep)
    return found


@contextlib.contextmanager
def _ctrl_c_ignored():
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to hold off
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _clean_up(ec2, live: list[str], token: str, sleep: typing.Callable[[float], None] = time.sleep) -> None:
    """Cancel the probe's reservations still there (a pending one once it settles); say which could not be, and how
    to cancel them."""
    with _ctrl_c_ignored():
        left, states = list(live), {}
        try:
            tagged = ec2.describe_capacity_reservations(Filters=[
                {"Name": f"tag:{PROBE_TAG}", "Values": [token]},
                {"Name": "state", "Values": ["active", "pending", "assessing", "delayed"]}])["CapacityReservations"]
            states = {cr["CapacityReservationId"]: cr.get("State") for cr in tagged}
            left += [i for i in states if i not in left]
        except Exception as error:  # the listing failed: the ids made so far are all we know of
            print(f"PROBE: could not list reservations tagged {PROBE_TAG}={token}: {error}")
        failed, pending = [], []
        for reservation_id in left:
            state = states.get(reservation_id)
            if state == "pending":
                state = _settled(ec2, reservation_id, state, sleep)
            if state == "pending":
                pending.append(reservation_id)
            elif state is None or state in CANCELLABLE:
                try:
                    ec2.cancel_capacity_reservation(CapacityReservationId=reservation_id)
                except Exception:
                    failed.append(reservation_id)
            # any other state (failed, cancelled, expired): nothing bills
        if failed or pending:
            print(f"PROBE: could not cancel {', '.join(failed + pending)}; each bills until cancelled"
                  + (f" ({', '.join(pending)} still pending: EC2 cancels none until it is active)" if pending else "")
                  + ": " + "; ".join(f"aws ec2 cancel-capacity-reservation --capacity-reservation-id {i}"
                                     for i in failed + pending))


# ---------------------------------------------------------------- the zones


def check_zones(ec2, s: Settings, cache: dict, probe: bool = False, say=print,
                context: typing.Mapping[str, typing.Any] | None = None, refresh: bool = False) -> Check:
    """Every zone of the region for the type's offering and, as far as EC2 tells without buying, capacity: spot
    placement scores (relative) and prices for spot, the probe for on-demand (PROBE=1), the block's zone for a
    Capacity Block. Caches the spot prices and the zones with capacity, best first (gpu_availability_zone=auto takes
    the first). `context` is what cdk.context.json holds already: its zones entry is kept unless `refresh` (see the
    module's docstring), and a fresh ranking that would move auto's zone is a WARN."""
    region_zones = [z["ZoneName"] for z in ec2.describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])["AvailabilityZones"]]
    offered = (cache.get(offerings_key(s.region, s.gpu_instance_type)) or offering(ec2, s.gpu_instance_type))["zones"]
    missing = [z for z in region_zones if z not in offered]
    not_offered = f"; not offered in {', '.join(missing)}" if missing else ""
    if not offered:
        return Check("zones", FAIL, f"{s.gpu_instance_type} is not offered in any zone of {s.region}",
                     "choose another region (-c region=...) or -c gpu_instance_type=...")
    scores = None
    if s.gpu_capacity_type == "capacity-block":
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[s.capacity_reservation_id])["CapacityReservations"]
        ranked = [cr["AvailabilityZone"] for cr in found]
        basis = f"the zone of Capacity Block {s.capacity_reservation_id}"
        detail = f"{basis}: {', '.join(ranked) or 'no such reservation'}"
    elif s.gpu_capacity_type == "spot":
        prices = spot_prices(ec2, s.gpu_instance_type)
        cache[spot_price_key(s.region, s.gpu_instance_type)] = {"zones": prices, "as_of": _now()}
        scores = spot_scores(ec2, s)
        candidates = [z for z in offered if z in prices]
        if scores is None:
            ranked, basis = sorted(candidates, key=lambda z: prices[z]), "spot price (placement scores not readable)"
        else:  # a zone EC2 left out of its top ten scores last; equal scores go to the lower price
            ranked = sorted(candidates, key=lambda z: (-scores.get(z, 0), prices[z]))
            basis = f"spot placement score for {s.gpu_node_count} nodes against the other zones', then price"
        detail = "spot " + ", ".join(f"{z} ${prices[z]:.4f}/h" + (f" score {scores.get(z, '-')}" if scores else "")
                                     for z in candidates) + (f" ({SINGLE_TYPE_SCORES})" if scores else "")
    elif probe:
        candidates = sorted(offered, key=lambda z: z != s.gpu_availability_zone)
        say(probe_cost_line(s.gpu_instance_type, candidates, s.gpu_node_count))
        results = probe_zones(ec2, s.gpu_instance_type, candidates, s.gpu_node_count)
        ranked = [z for z in candidates if results[z] is None]
        basis = f"probe: a reservation of {s.gpu_node_count} instances became active"
        detail = "probe: " + ", ".join(f"{z} {'capacity' if results[z] is None else results[z]}" for z in candidates)
    else:
        ranked, basis = list(offered), "offered (capacity not probed: PROBE=1 probes it)"
        detail = f"offered in {', '.join(offered)} (capacity not probed: PROBE=1 probes it)"
    key = gpu_zones_key(s.region, s.gpu_instance_type, s.gpu_capacity_type)
    held = (context or {}).get(key)
    # A Capacity Block's zone is a fact of the block named, not a ranking that moves: always the fresh one.
    keep = isinstance(held, dict) and bool(held.get("zones")) and not refresh and s.gpu_capacity_type != "capacity-block"
    if not keep:
        cache[key] = {"zones": ranked, "basis": basis, "as_of": _now()}
    reason = f"{s.gpu_instance_type} {s.gpu_capacity_type}: {detail}{not_offered}"
    if not ranked:
        return Check("zones", FAIL, reason + "; no zone with capacity",
                     "try later, another gpu_instance_type or region, or gpu_capacity_type")
    if s.gpu_availability_zone == AUTO_ZONE:
        return _auto_zone(s, reason, ranked, held if keep else None, key)
    if s.gpu_availability_zone not in ranked:
        verdict = FAIL if s.gpu_capacity_type == "capacity-block" or probe else WARN
        return Check("zones", verdict, reason + f"; {s.gpu_availability_zone} is not among the zones with capacity "
                     f"({basis})", f"-c gpu_availability_zone={ranked[0]} (or auto)")
    if scores is not None and scores.get(s.gpu_availability_zone, 0) < scores.get(ranked[0], 0):
        return Check("zones", WARN, reason + f"; {s.gpu_availability_zone} scores {scores.get(s.gpu_availability_zone, '-')}"
                     f", below {ranked[0]}'s {scores[ranked[0]]}", f"-c gpu_availability_zone={ranked[0]} (or auto)")
    return Check("zones", PASS, reason)


def _auto_zone(s: Settings, reason: str, ranked: list[str], held: dict | None, key: str) -> Check:
    """auto's zone: the first of the ranking that availability_zones has; from the kept cache when there is one, with
    a WARN when the fresh ranking would move it."""
    def first(zones: list[str]) -> str | None:
        return next((z for z in zones if z in s.availability_zones), None)

    if held is None:
        return Check("zones", PASS, reason + f"; auto takes the first of {', '.join(ranked)} in availability_zones")
    kept, fresh = first(held["zones"]), first(ranked)
    since = f"{key} in cdk.context.json, {held.get('basis', 'cached')}, {held.get('as_of', '')}".rstrip(", ")
    if kept is None:
        return Check("zones", WARN, reason + f"; the kept zones ({', '.join(held['zones'])}; {since}) are not in "
                     "availability_zones", "add one of them to availability_zones, or make preflight REFRESH=1")
    if kept == fresh:
        return Check("zones", PASS, reason + f"; auto keeps {kept} ({since}; REFRESH=1 ranks again)")
    ranked_first = fresh or "no zone of availability_zones"
    return Check("zones", WARN, reason + f"; auto keeps {kept} ({since}), where a fresh check ranks {ranked_first} "
                 "first: a zone that moves makes CloudFormation replace the GPU node group (its Subnets are "
                 "create-only), ending a running job's nodes",
                 "keep it; or, with no job running, make preflight REFRESH=1 to take the fresh ranking")


# ---------------------------------------------------------------- spot and Capacity Blocks


def spot_price_check(s: Settings, cache: dict) -> Check:
    """The spot price the synth will price the nodes at, against on-demand."""
    prices = (cache.get(spot_price_key(s.region, s.gpu_instance_type)) or {}).get("zones") or {}
    on_demand = INSTANCE_TYPES[s.gpu_instance_type].usd_per_hour
    price = prices.get(s.gpu_availability_zone)
    if price is None:
        return Check("spot price", WARN, f"EC2 lists no spot price of {s.gpu_instance_type} in {s.gpu_availability_zone}",
                     "choose a zone with a spot price (-c gpu_availability_zone=auto)")
    return Check("spot price", PASS, f"{s.gpu_instance_type} in {s.gpu_availability_zone}: ${price:.4f}/h now, "
                 f"{price / on_demand:.0%} of on-demand ${on_demand}/h; cached for the synth's review (it moves)")


def placement_mismatches(reservation: dict, s: Settings) -> list[str]:
    """How a capacity reservation's (or block's) instance type and zone differ from the GPU nodes' settings: it
    launches only that type in that zone (EC2 API Reference, CapacityReservation)."""
    problems = []
    if reservation.get("InstanceType") != s.gpu_instance_type:
        problems.append(f"it holds {reservation.get('InstanceType')}, not {s.gpu_instance_type}")
    if reservation.get("AvailabilityZone") != s.gpu_availability_zone:
        problems.append(f"it is in {reservation.get('AvailabilityZone')}, not {s.gpu_availability_zone}")
    return problems


def check_capacity_block(ec2, s: Settings, job_s: float | None, now: datetime | None = None) -> list[Check]:
    """The block the settings name: a Capacity Block of the GPU type, in the GPU zone, with gpu_node_count
    instances, active (or starting before the job's attempts give up); and whether the job, predicted at job_s
    seconds from now, ends before EKS scales the group down (40 minutes before the block's end)."""
    name, cr_id = "capacity block", s.capacity_reservation_id
    now = now or datetime.now(timezone.utc)
    found = ec2.describe_capacity_reservations(CapacityReservationIds=[cr_id])["CapacityReservations"]
    if not found:
        return [Check(name, FAIL, f"{cr_id} does not exist in {s.region}", "check the id and region")]
    block = found[0]
    problems = []
    if block.get("ReservationType") != "capacity-block":
        problems.append(f"it is an On-Demand Capacity Reservation, not a Capacity Block (use gpu_capacity_type=on-demand)")
    problems += placement_mismatches(block, s)
    if block.get("TotalInstanceCount", 0) < s.gpu_node_count:
        problems.append(f"it holds {block.get('TotalInstanceCount', 0)} instance(s), gpu_node_count is {s.gpu_node_count}")
    start, end, state = block.get("StartDate"), block.get("EndDate"), block.get("State")
    attempts_s = (s.backoff_limit + 1) * s.training.pre_running_deadline_seconds
    if state == "scheduled" and start and start - now > timedelta(seconds=attempts_s):
        problems.append(f"it starts at {start:%Y-%m-%d %H:%M} UTC, after the job's {s.backoff_limit + 1} attempt(s) x "
                        f"pre_running_deadline_seconds would have given up (deploy from "
                        f"{start - timedelta(seconds=attempts_s):%Y-%m-%d %H:%M} UTC)")
    elif state not in ("active", "scheduled"):
        problems.append(f"its state is {state}")
    if problems:
        fix = (f"-c gpu_instance_type={block.get('InstanceType')} -c gpu_availability_zone={block.get('AvailabilityZone')}"
               if block.get("ReservationType") == "capacity-block" else "-c gpu_capacity_type=on-demand")
        return [Check(name, FAIL, f"{cr_id}: " + "; ".join(problems), fix)]
    checks = [Check(name, PASS, f"{cr_id}: {block['TotalInstanceCount']} x {s.gpu_instance_type} in "
                    f"{s.gpu_availability_zone}, {state}, {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC")]
    if end is None:
        return checks
    scale_down = end - EKS_SCALE_DOWN_BEFORE_BLOCK_END
    if job_s is None:
        checks.append(Check("job in the block", WARN, f"the job's time cannot be predicted (a model the planner cannot "
                            f"size); EKS scales the nodes to 0 at {scale_down:%Y-%m-%d %H:%M} UTC",
                            "make sure the run ends before then"))
        return checks
    finish = max(now, start or now) + timedelta(seconds=job_s)
    if finish > scale_down:
        checks.append(Check("job in the block", WARN,
                            f"the job's predicted ~{math.ceil(job_s / 60)} min from "
                            f"{max(now, start or now):%H:%M} end at {finish:%Y-%m-%d %H:%M} UTC, after EKS scales the "
                            f"nodes to 0 at {scale_down:%Y-%m-%d %H:%M} UTC (40 min before the block ends; EC2 ends its "
                            "instances then)", "fewer training.steps, or extend the block (aws ec2 "
                            "purchase-capacity-block-extension)"))
    else:
        checks.append(Check("job in the block", PASS, f"predicted ~{math.ceil(job_s / 60)} min, done by "
                            f"{finish:%Y-%m-%d %H:%M} UTC, before EKS scales the nodes to 0 at "
                            f"{scale_down:%Y-%m-%d %H:%M} UTC"))
    return checks


def predicted_job_s(s: Settings) -> float | None:
    """Seconds from deploy to the job's last step: the GPU nodes' start (tools/review.py's assumption) and the
    planner's predicted step time x steps; None for a model the planner cannot size."""
    from stacks.settings import planned_trainer_options
    from tools.review import first_step_s

    options, _ = planned_trainer_options(s)
    step_s = options.get("predicted_step_seconds")
    return first_step_s() + s.training.steps * step_s if step_s else None
