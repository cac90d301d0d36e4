"""Preflight's capacity checks (tools/capacity_checks.py) against recorded EC2 answers: moto's EC2 where it has the
API (instance types and offerings, quotas), botocore's Stubber where it does not (spot placement scores, spot price
history in a known shape, capacity reservations and Capacity Blocks). Nothing here reaches AWS.

The probe's cleanup is tried at its worst moments: Ctrl-C before a cancel, Ctrl-C after EC2 made a reservation but
before its answer came back, and an error that stops the probe half-way."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber

from stacks.context import settings_from_files
from tests.conftest import ROOT
from tests.infra.test_preflight import aws, app  # noqa: F401  (fixtures)
from tools import capacity_checks as capacity
from tools import preflight
from tools.verdicts import FAIL, PASS, WARN, Check

BLOCK = "cr-0123456789abcdef0"
ZONES = ("us-east-2a", "us-east-2b", "us-east-2c")
OFFERED = {"instance-type-offerings:us-east-2:g6.12xlarge": {"usage_classes": ["on-demand", "spot"], "zones": list(ZONES)}}
AZ_IDS = {"us-east-2a": "use2-az1", "us-east-2b": "use2-az2", "us-east-2c": "use2-az3"}
P5_BLOCK = ("gpu_capacity_type=capacity-block", "gpu_instance_type=p5.48xlarge", f"capacity_reservation_id={BLOCK}")
"""A p5.48xlarge Capacity Block's settings (-c key=value), for settings(*P5_BLOCK, ...)."""


def settings(*overrides: str):
    return settings_from_files(ROOT / "cdk.json", overrides, resolve_lookups=False)


def p5_block_offered() -> dict:
    """EC2's offerings of p5.48xlarge as preflight caches them: bought as Capacity Blocks, in every zone (a new dict
    each call: check_zones writes its ranking into the cache)."""
    return {"instance-type-offerings:us-east-2:p5.48xlarge": {"usage_classes": ["capacity-block"], "zones": list(ZONES)}}


def ec2_stub():
    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def zones_answer() -> dict:
    return {"AvailabilityZones": [{"ZoneName": name, "ZoneId": zone_id, "State": "available", "RegionName": "us-east-2"}
                                  for name, zone_id in AZ_IDS.items()]}


def stub_region_zones(stub) -> None:
    stub.add_response("describe_availability_zones", zones_answer(),
                      {"Filters": [{"Name": "zone-type", "Values": ["availability-zone"]}]})


# ------------------------------------------------------------------ what EC2 sells


def test_a_type_ec2_does_not_sell_as_a_capacity_block_fails(aws):
    """moto's EC2 data (AWS's listings): g6.12xlarge is sold on-demand and spot only, p5.48xlarge as capacity-block too."""
    ec2 = boto3.client("ec2", region_name="us-east-2")
    cache = {}
    check = capacity.check_capacity_type(ec2, settings("gpu_capacity_type=capacity-block",
                                                       f"capacity_reservation_id={BLOCK}"), cache)
    assert check == Check("capacity type", FAIL, "g6.12xlarge cannot be bought as capacity-block in us-east-2: EC2 sells "
                          "it as on-demand, spot", "-c gpu_capacity_type=<on-demand, spot> or another gpu_instance_type")
    assert cache["instance-type-offerings:us-east-2:g6.12xlarge"]["zones"] == list(ZONES)
    p5 = settings(*P5_BLOCK)
    assert capacity.check_capacity_type(ec2, p5, {}).verdict == PASS


def test_spot_is_checked_against_the_spot_quota_not_the_on_demand_one(aws):
    """EC2 User Guide, "Spot Instance quotas": All G and VT Spot Instance Requests (L-3819A6DF) is its own quota."""
    aws["L-3819A6DF"] = 0.0
    quotas, ec2 = boto3.client("service-quotas", region_name="us-east-2"), boto3.client("ec2", region_name="us-east-2")
    check = preflight.check_vcpu_quota(quotas, ec2, "g6.12xlarge", 2, "us-east-2", "GPU nodes", "spot")
    assert check.reason == "2 x g6.12xlarge need 96 vCPU; quota 'All G and VT Spot Instance Requests' (L-3819A6DF) is 0, " \
                           "0 in use, 0 free"
    assert "--quota-code L-3819A6DF --desired-value 96" in check.fix


def test_each_market_counts_only_its_own_instances_in_use():
    """EC2 User Guide, "Spot Instance quotas": running spot instances count against the spot quota, on-demand ones
    against the on-demand quota. Here 3 x g4dn.xlarge on-demand (12 vCPU of G), 1 x g6.12xlarge spot (48 vCPU of G)
    and 1 x m7i.2xlarge spot (a standard family, counted in neither G quota) run."""
    running = [{"InstanceType": "g4dn.xlarge"}] * 3 + [{"InstanceType": kind, "InstanceLifecycle": "spot"}
                                                        for kind in ("g6.12xlarge", "m7i.2xlarge")]
    ec2, stub = ec2_stub()
    quotas = boto3.client("service-quotas", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    quota_stub = Stubber(quotas)
    for code in ("L-3819A6DF", "L-DB2E81BA"):  # G and VT: spot, then on-demand
        quota_stub.add_response("get_service_quota", {"Quota": {"QuotaCode": code, "Value": 96.0}},
                                {"ServiceCode": "ec2", "QuotaCode": code})
        stub.add_response("describe_instances", {"Reservations": [{"Instances": running}]},
                          {"Filters": [{"Name": "instance-state-name", "Values": ["pending", "running"]}]})
    stub.activate()
    quota_stub.activate()
    spot = preflight.check_vcpu_quota(quotas, ec2, "g6.12xlarge", 2, "us-east-2", "GPU nodes", "spot")
    on_demand = preflight.check_vcpu_quota(quotas, ec2, "g6.12xlarge", 2, "us-east-2", "GPU nodes")
    assert spot.verdict == FAIL and "(L-3819A6DF) is 96, 48 in use, 48 free" in spot.reason
    assert on_demand.verdict == FAIL and "(L-DB2E81BA) is 96, 12 in use, 84 free" in on_demand.reason


@pytest.mark.parametrize(("instance_type", "market", "code", "name"), [
    # The Amazon EC2 documentation's "Amazon EC2 instance type quotas" tables: spot splits the P families.
    ("p5.48xlarge", "spot", "L-C4BD4855", "All P5 Spot Instance Requests"),
    ("p4d.24xlarge", "spot", "L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
    ("p5.48xlarge", "on-demand", "L-417A185B", "Running On-Demand P instances"),
])
def test_each_p_family_is_checked_against_the_quota_ec2_counts_it_in(aws, instance_type, market, code, name):
    aws[code] = 0.0
    quotas, ec2 = boto3.client("service-quotas", region_name="us-east-2"), boto3.client("ec2", region_name="us-east-2")
    check = preflight.check_vcpu_quota(quotas, ec2, instance_type, 1, "us-east-2", "GPU nodes", market)
    assert check.verdict == FAIL and f"quota '{name}' ({code}) is 0, 0 in use" in check.reason


def test_a_spot_p_family_the_quota_table_does_not_name_is_said_so(aws):
    quotas, ec2 = boto3.client("service-quotas", region_name="us-east-2"), boto3.client("ec2", region_name="us-east-2")
    check = preflight.check_vcpu_quota(quotas, ec2, "p6-b200.48xlarge", 1, "us-east-2", "GPU nodes", "spot")
    assert check.verdict == WARN and check.reason == "p6-b200.48xlarge counts against a quota this check does not know"


def test_an_on_demand_reservation_that_is_a_capacity_block_fails():
    ec2, stub = ec2_stub()
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [block_answer()]},
                      {"CapacityReservationIds": [BLOCK]})
    stub.activate()
    [check] = preflight.check_capacity_reservation(ec2, settings(f"capacity_reservation_id={BLOCK}"))
    assert check == Check("capacity reservation", FAIL, f"{BLOCK} is a Capacity Block, which on-demand nodes cannot use",
                          "-c gpu_capacity_type=capacity-block")


# ------------------------------------------------------------------ spot zones and prices


def spot_history(prices: dict[str, float]) -> dict:
    when = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
    return {"SpotPriceHistory": [{"AvailabilityZone": zone, "InstanceType": "g6.12xlarge", "ProductDescription": "Linux/UNIX",
                                  "SpotPrice": f"{price:.6f}", "Timestamp": when} for zone, price in prices.items()]}


def spot_zones(scores: dict[str, int] | None, zone="us-east-2a", context: dict | None = None, refresh: bool = False):
    ec2, stub = ec2_stub()
    stub_region_zones(stub)
    stub.add_response("describe_spot_price_history", spot_history({"us-east-2a": 1.9, "us-east-2b": 1.4, "us-east-2c": 1.6}),
                      {"InstanceTypes": ["g6.12xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY})
    placement = {"InstanceTypes": ["g6.12xlarge"], "TargetCapacity": 2, "SingleAvailabilityZone": True,
                 "RegionNames": ["us-east-2"]}
    if scores is None:
        stub.add_client_error("get_spot_placement_scores", service_error_code="UnauthorizedOperation",
                              expected_params=placement)
    else:
        stub.add_response("get_spot_placement_scores", {"SpotPlacementScores": [
            {"Region": "us-east-2", "AvailabilityZoneId": AZ_IDS[z], "Score": score} for z, score in scores.items()]},
            placement)
        stub.add_response("describe_availability_zones", zones_answer(), {})
    stub.activate()
    cache = dict(OFFERED)
    check = capacity.check_zones(ec2, settings("gpu_capacity_type=spot", f"gpu_availability_zone={zone}"), cache,
                                 context=context, refresh=refresh)
    stub.assert_no_pending_responses()
    return check, cache


def test_spot_zones_rank_by_placement_score_and_cache_the_prices():
    check, cache = spot_zones({"us-east-2a": 9, "us-east-2b": 3, "us-east-2c": 7})
    assert cache["gpu-zones:us-east-2:g6.12xlarge:spot"]["zones"] == ["us-east-2a", "us-east-2c", "us-east-2b"]
    assert cache["spot-price:us-east-2:g6.12xlarge"]["zones"] == {"us-east-2a": 1.9, "us-east-2b": 1.4, "us-east-2c": 1.6}
    assert check == Check("zones", PASS, "g6.12xlarge spot: spot us-east-2a $1.9000/h score 9, us-east-2b $1.4000/h "
                          "score 3, us-east-2c $1.6000/h score 7 (scores for one instance type run low (EC2 User "
                          "Guide, Spot placement score): only their order counts)")


def test_a_spot_zone_scored_below_another_warns_with_the_best_zone():
    check, _ = spot_zones({"us-east-2a": 9, "us-east-2b": 3, "us-east-2c": 7}, zone="us-east-2b")
    assert (check.verdict, check.fix) == (WARN, "-c gpu_availability_zone=us-east-2a (or auto)")
    assert check.reason.endswith("; us-east-2b scores 3, below us-east-2a's 9")


@pytest.mark.parametrize(("scores", "ranked"), [
    # EC2 User Guide, "Spot placement score", Limitations: one instance type is scored low. Low scores everywhere
    # still rank the zones, with no warning: 3 before 2 before 1.
    ({"us-east-2a": 2, "us-east-2b": 3, "us-east-2c": 1}, ["us-east-2b", "us-east-2a", "us-east-2c"]),
    # Equal scores go to the lower price: b $1.40, c $1.60, a $1.90.
    ({"us-east-2a": 3, "us-east-2b": 3, "us-east-2c": 3}, ["us-east-2b", "us-east-2c", "us-east-2a"]),
])
def test_spot_zones_rank_by_score_against_each_other_then_price(scores, ranked):
    check, cache = spot_zones(scores, zone="auto")
    assert cache["gpu-zones:us-east-2:g6.12xlarge:spot"]["zones"] == ranked
    assert check.verdict == PASS and check.reason.endswith(f"; auto takes the first of {', '.join(ranked)} in "
                                                           "availability_zones")


def test_without_placement_scores_spot_zones_rank_by_price():
    check, cache = spot_zones(None)
    assert cache["gpu-zones:us-east-2:g6.12xlarge:spot"] == {
        "zones": ["us-east-2b", "us-east-2c", "us-east-2a"], "basis": "spot price (placement scores not readable)",
        "as_of": cache["gpu-zones:us-east-2:g6.12xlarge:spot"]["as_of"]}
    assert check.verdict == PASS


def test_each_zones_price_is_its_newest_record_whatever_their_order():
    # DescribeSpotPriceHistory may return a zone's earlier prices too: the one in effect is the newest.
    ec2, stub = ec2_stub()
    at = lambda hour: datetime(2026, 12, 1, hour, 0, tzinfo=timezone.utc)  # noqa: E731
    records = [("us-east-2a", at(9), "1.900000"), ("us-east-2a", at(8), "2.100000"),  # newest first
               ("us-east-2b", at(7), "1.600000"), ("us-east-2b", at(9), "1.400000")]  # oldest first
    stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        {"AvailabilityZone": zone, "InstanceType": "g6.12xlarge", "ProductDescription": "Linux/UNIX", "SpotPrice": price,
         "Timestamp": when} for zone, when, price in records]}, None)
    stub.activate()
    assert capacity.spot_prices(ec2, "g6.12xlarge") == {"us-east-2a": 1.9, "us-east-2b": 1.4}


def test_the_spot_price_line_compares_with_on_demand():
    cache = {"spot-price:us-east-2:g6.12xlarge": {"zones": {"us-east-2a": 1.38048}}}
    assert capacity.spot_price_check(settings("gpu_capacity_type=spot"), cache) == Check(
        "spot price", PASS, "g6.12xlarge in us-east-2a: $1.3805/h now, 30% of on-demand $4.6016/h; cached for the "
        "synth's review (it moves)")
    assert capacity.spot_price_check(settings("gpu_capacity_type=spot"), {}).verdict == WARN


# ------------------------------------------------------------------ the probe


def created(reservation_id: str, zone: str, state: str = "active") -> dict:
    return {"CapacityReservation": {"CapacityReservationId": reservation_id, "AvailabilityZone": zone,
                                    "InstanceType": "g6.12xlarge", "State": state, "TotalInstanceCount": 1}}


def stub_create(stub, zone: str, reservation_id: str | None = None, error: str | None = None,
                state: str = "active") -> None:
    params = {"InstanceType": "g6.12xlarge", "InstancePlatform": "Linux/UNIX", "AvailabilityZone": zone,
              "InstanceCount": 1, "EndDateType": "unlimited", "InstanceMatchCriteria": "targeted",
              "ClientToken": f"t-{zone}", "TagSpecifications": [{"ResourceType": "capacity-reservation",
                                                                  "Tags": [{"Key": capacity.PROBE_TAG, "Value": "t"}]}]}
    if error:
        stub.add_client_error("create_capacity_reservation", service_error_code=error, expected_params=params)
    else:
        stub.add_response("create_capacity_reservation", created(reservation_id, zone, state), params)


def stub_cancel(stub, reservation_id: str) -> None:
    stub.add_response("cancel_capacity_reservation", {"Return": True}, {"CapacityReservationId": reservation_id})


def stub_state(stub, reservation_id: str, state: str) -> None:
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        {"CapacityReservationId": reservation_id, "State": state}]}, {"CapacityReservationIds": [reservation_id]})


def stub_tagged(stub, *reservation_ids: str, state: str = "active") -> None:
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        {"CapacityReservationId": i, "State": state} for i in reservation_ids]},
        {"Filters": [{"Name": f"tag:{capacity.PROBE_TAG}", "Values": ["t"]},
                     {"Name": "state", "Values": ["active", "pending", "assessing", "delayed"]}]})


def test_the_probe_makes_and_cancels_one_reservation_per_zone():
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001")
    stub_cancel(stub, "cr-00000000000000001")
    stub_create(stub, "us-east-2b", error="InsufficientInstanceCapacity")
    stub_create(stub, "us-east-2c", error="VcpuLimitExceeded")
    stub_tagged(stub)  # the final sweep finds nothing left
    stub.activate()
    assert capacity.probe_zones(ec2, "g6.12xlarge", list(ZONES), token="t") == {
        "us-east-2a": None, "us-east-2b": "InsufficientInstanceCapacity", "us-east-2c": "VcpuLimitExceeded"}
    stub.assert_no_pending_responses()


def test_a_pending_reservation_is_waited_for_and_counted_only_once_active():
    # botocore's EC2 model: CancelCapacityReservation takes assessing, scheduled, active, delayed; not pending.
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001", state="pending")
    stub_state(stub, "cr-00000000000000001", "pending")
    stub_state(stub, "cr-00000000000000001", "active")
    stub_cancel(stub, "cr-00000000000000001")  # cancelled once active, not before
    stub_create(stub, "us-east-2b", "cr-00000000000000002", state="pending")
    stub_state(stub, "cr-00000000000000002", "failed")  # EC2 could not provision it: no capacity, nothing to cancel
    stub_tagged(stub)
    stub.activate()
    slept = []
    assert capacity.probe_zones(ec2, "g6.12xlarge", list(ZONES[:2]), token="t", sleep=slept.append) == {
        "us-east-2a": None, "us-east-2b": "reservation failed"}
    assert slept == [3.0, 3.0, 3.0]
    stub.assert_no_pending_responses()


@pytest.mark.parametrize("state", ["assessing", "delayed"])
def test_a_reservation_ec2_is_still_assessing_or_has_delayed_is_cancelled_and_is_no_capacity(state):
    """EC2's capacity reservation states: assessing and delayed are not yet capacity (only active is); both can be
    cancelled, and are, at once."""
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001", state=state)
    stub_cancel(stub, "cr-00000000000000001")
    stub_tagged(stub)
    stub.activate()
    assert capacity.probe_zones(ec2, "g6.12xlarge", ["us-east-2a"], token="t", sleep=lambda s: None) == {
        "us-east-2a": f"reservation {state}"}
    stub.assert_no_pending_responses()


def test_a_reservation_still_pending_after_the_wait_is_no_capacity_and_named_with_its_cancel_command(capsys):
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001", state="pending")
    for _ in range(capacity.SETTLE_POLLS):
        stub_state(stub, "cr-00000000000000001", "pending")
    stub_tagged(stub, "cr-00000000000000001", state="pending")  # the cleanup waits once more
    for _ in range(capacity.SETTLE_POLLS):
        stub_state(stub, "cr-00000000000000001", "pending")
    stub.activate()
    assert capacity.probe_zones(ec2, "g6.12xlarge", ["us-east-2a"], token="t", sleep=lambda s: None) == {
        "us-east-2a": "reservation pending"}
    stub.assert_no_pending_responses()  # and no cancel was sent while it was pending
    assert capsys.readouterr().out == (
        "PROBE: could not cancel cr-00000000000000001; each bills until cancelled (cr-00000000000000001 still pending: "
        "EC2 cancels none until it is active): aws ec2 cancel-capacity-reservation --capacity-reservation-id "
        "cr-00000000000000001\n")


def test_a_probe_the_caller_may_not_make_names_the_three_permissions_it_needs():
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", error="UnauthorizedOperation")
    stub_tagged(stub)
    stub.activate()
    [check] = preflight._guarded("zones", lambda: capacity.probe_zones(ec2, "g6.12xlarge", ["us-east-2a"], token="t"))
    assert check == Check("zones", FAIL, "could not check: CreateCapacityReservation failed with UnauthorizedOperation",
                          "PROBE=1 writes: grant ec2:CreateCapacityReservation, ec2:CancelCapacityReservation and "
                          "ec2:CreateTags (ReadOnlyAccess has none of them), or run preflight without PROBE=1")


class Interrupt:
    """An EC2 client on which Ctrl-C arrives at one call: before it is sent, or after EC2 did it and before its
    answer came back."""

    def __init__(self, client, operation: str, after_call: bool):
        self.client, self.operation, self.after_call = client, operation, after_call

    def __getattr__(self, name):
        method = getattr(self.client, name)
        if name != self.operation:
            return method

        def call(**kwargs):
            self.operation = None  # once
            if self.after_call:
                method(**kwargs)
            raise KeyboardInterrupt
        return call


def probe_stopped_before_its_cancel(ec2, stub) -> None:
    """Ctrl-C as the probe is about to cancel its reservation: every stubbed call, and no other, is made."""
    stub.activate()
    with pytest.raises(KeyboardInterrupt):
        capacity.probe_zones(Interrupt(ec2, "cancel_capacity_reservation", after_call=False), "g6.12xlarge",
                             list(ZONES), token="t")
    stub.assert_no_pending_responses()


def test_ctrl_c_before_a_cancel_still_cancels_the_reservation():
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001")
    stub_tagged(stub, "cr-00000000000000001")  # it is still there: listed once, cancelled once
    stub_cancel(stub, "cr-00000000000000001")
    probe_stopped_before_its_cancel(ec2, stub)


@pytest.mark.parametrize("listing", ["fails", "lags"])
def test_a_reservation_the_tag_listing_does_not_show_is_still_cancelled(listing, capsys):
    """Ctrl-C before the cancel of an active reservation the probe made (its id known from the create): the cleanup's
    tag listing fails (throttled) or does not show it yet (EC2's describe calls are eventually consistent). It bills
    at the on-demand rate until cancelled, so the cleanup cancels it by the id it has."""
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001")
    if listing == "fails":
        stub.add_client_error("describe_capacity_reservations", service_error_code="RequestLimitExceeded")
    else:
        stub_tagged(stub)
    stub_cancel(stub, "cr-00000000000000001")
    probe_stopped_before_its_cancel(ec2, stub)
    assert "could not cancel" not in capsys.readouterr().out


def test_ctrl_c_after_ec2_made_a_reservation_whose_answer_was_lost_finds_it_by_its_tag():
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001")
    stub_cancel(stub, "cr-00000000000000001")
    stub_create(stub, "us-east-2b", "cr-00000000000000002")  # made by EC2; the probe never learns its id
    stub_tagged(stub, "cr-00000000000000002")
    stub_cancel(stub, "cr-00000000000000002")
    stub.activate()

    class SecondCreate(Interrupt):
        def __getattr__(self, name):
            if name == "create_capacity_reservation" and self.skip:
                self.skip -= 1
                return getattr(self.client, name)
            return super().__getattr__(name)

    probe = SecondCreate(ec2, "create_capacity_reservation", after_call=True)
    probe.skip = 1
    with pytest.raises(KeyboardInterrupt):
        capacity.probe_zones(probe, "g6.12xlarge", list(ZONES), token="t")
    stub.assert_no_pending_responses()


def test_an_error_half_way_stops_the_probe_after_its_cleanup(capsys):
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001")
    stub_cancel(stub, "cr-00000000000000001")
    stub_create(stub, "us-east-2b", error="UnauthorizedOperation")
    stub_tagged(stub)
    stub.activate()
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        capacity.probe_zones(ec2, "g6.12xlarge", list(ZONES), token="t")
    stub.assert_no_pending_responses()


def test_a_cancel_that_fails_in_the_cleanup_names_the_command_that_stops_the_bill(capsys):
    ec2, stub = ec2_stub()
    stub_create(stub, "us-east-2a", "cr-00000000000000001")
    stub_tagged(stub, "cr-00000000000000001")
    stub.add_client_error("cancel_capacity_reservation", service_error_code="RequestLimitExceeded")
    stub.activate()
    with pytest.raises(KeyboardInterrupt):
        capacity.probe_zones(Interrupt(ec2, "cancel_capacity_reservation", after_call=False), "g6.12xlarge",
                             list(ZONES), token="t")
    assert capsys.readouterr().out == ("PROBE: could not cancel cr-00000000000000001; each bills until cancelled: "
                                       "aws ec2 cancel-capacity-reservation --capacity-reservation-id cr-00000000000000001\n")


def test_the_probed_zones_say_the_cost_first_and_the_configured_zone_without_capacity_fails(monkeypatch):
    ec2, stub = ec2_stub()
    stub_region_zones(stub)
    stub.activate()
    said, probed = [], []

    def probe(client, instance_type, zones, count, token=None):
        probed.append((list(zones), count))
        return {"us-east-2a": "InsufficientInstanceCapacity", "us-east-2b": None, "us-east-2c": None}

    monkeypatch.setattr(capacity, "probe_zones", probe)
    cache = dict(OFFERED)
    check = capacity.check_zones(ec2, settings(), cache, probe=True, say=lambda line: said.append((line, list(probed))))
    # 3 zones x 2 instances x $4.6016/h for a minute each = $0.46, said before any reservation is made.
    assert said == [("PROBE: creating and at once cancelling an On-Demand Capacity Reservation of 2 x g6.12xlarge "
                     "(gpu_node_count, in one zone) in each of us-east-2a, us-east-2b, us-east-2c; each bills per "
                     "second at the on-demand rate while it exists (seconds; up to 30 s while EC2 settles a pending "
                     "one): at most $0.46 if each lived a minute", [])]
    # The configured zone first, and the job's 2 nodes in each zone: one instance free says nothing of two.
    assert probed == [(["us-east-2a", "us-east-2b", "us-east-2c"], 2)]
    assert cache["gpu-zones:us-east-2:g6.12xlarge:on-demand"]["zones"] == ["us-east-2b", "us-east-2c"]
    assert (check.verdict, check.fix) == (FAIL, "-c gpu_availability_zone=us-east-2b (or auto)")


def test_auto_takes_the_first_zone_preflight_found_and_synth_reads_it_from_the_cache(aws, app, capsys):
    assert preflight.main(["--cdk-json", str(app / "cdk.json"), "-c", "gpu_availability_zone=auto"]) == 0
    assert "PASS  gpu zone                   auto is us-east-2a" in capsys.readouterr().out
    assert settings_from_files(app / "cdk.json", ["gpu_availability_zone=auto"]).gpu_availability_zone == "us-east-2a"
    assert json.loads((app / "cdk.context.json").read_text())["gpu-zones:us-east-2:g6.12xlarge:on-demand"]["basis"] == \
        "offered (capacity not probed: PROBE=1 probes it)"


# ------------------------------------------------------------------ the zone auto took stays

SPOT_ZONES_KEY = "gpu-zones:us-east-2:g6.12xlarge:spot"


def cached_zones(*zones: str) -> dict:
    return {SPOT_ZONES_KEY: {"zones": list(zones), "basis": "spot placement score", "as_of": "2026-12-01T09:00:00Z"}}


def test_a_fresh_ranking_that_would_move_auto_warns_and_keeps_the_cached_zone():
    # AWS::EKS::Nodegroup: Subnets, CapacityType and InstanceTypes are create-only; a zone that moves replaces the group.
    check, cache = spot_zones({"us-east-2a": 9, "us-east-2b": 3, "us-east-2c": 7}, zone="auto",
                              context=cached_zones("us-east-2b", "us-east-2a"))
    assert SPOT_ZONES_KEY not in cache  # nothing written over the kept entry
    assert (check.verdict, check.fix) == (WARN, "keep it; or, with no job running, make preflight REFRESH=1 to take "
                                                "the fresh ranking")
    assert check.reason.endswith(f"; auto keeps us-east-2b ({SPOT_ZONES_KEY} in cdk.context.json, spot placement "
                                 "score, 2026-12-01T09:00:00Z), where a fresh check ranks us-east-2a first: a zone that "
                                 "moves makes CloudFormation replace the GPU node group (its Subnets are create-only), "
                                 "ending a running job's nodes")


def test_a_fresh_ranking_that_agrees_keeps_the_cache_quietly():
    check, cache = spot_zones({"us-east-2a": 9, "us-east-2b": 3, "us-east-2c": 7}, zone="auto",
                              context=cached_zones("us-east-2a", "us-east-2b"))
    assert SPOT_ZONES_KEY not in cache and check.verdict == PASS
    assert check.reason.endswith("; auto keeps us-east-2a (gpu-zones:us-east-2:g6.12xlarge:spot in cdk.context.json, "
                                 "spot placement score, 2026-12-01T09:00:00Z; REFRESH=1 ranks again)")


def test_refresh_replaces_the_cached_ranking():
    check, cache = spot_zones({"us-east-2a": 9, "us-east-2b": 3, "us-east-2c": 7}, zone="auto",
                              context=cached_zones("us-east-2c"), refresh=True)
    assert cache[SPOT_ZONES_KEY]["zones"] == ["us-east-2a", "us-east-2c", "us-east-2b"] and check.verdict == PASS


def test_preflight_run_twice_keeps_the_zone_of_the_first_and_refresh_moves_it(aws, app, capsys):
    context_file = app / "cdk.context.json"
    key = "gpu-zones:us-east-2:g6.12xlarge:on-demand"
    context_file.write_text(json.dumps(json.loads(context_file.read_text()) | {key: {
        "zones": ["us-east-2b"], "basis": "probe", "as_of": "2026-12-01T09:00:00Z"}}))
    argv = ["--cdk-json", str(app / "cdk.json"), "-c", "gpu_availability_zone=auto"]
    assert preflight.main(argv) == 0  # a WARN, not a FAIL: the deploy goes on in the kept zone
    out = capsys.readouterr().out
    assert "WARN  zones" in out and "auto keeps us-east-2b" in out and "PASS  gpu zone                   auto is " \
        "us-east-2b" in out
    assert json.loads(context_file.read_text())[key]["zones"] == ["us-east-2b"]
    assert preflight.main(argv + ["--refresh"]) == 0
    assert "auto is us-east-2a" in capsys.readouterr().out
    assert json.loads(context_file.read_text())[key]["zones"] == ["us-east-2a", "us-east-2b", "us-east-2c"]


# ------------------------------------------------------------------ Capacity Blocks

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc)
BLOCK_END = datetime(2026, 12, 3, 11, 30, tzinfo=timezone.utc)  # blocks end at 11:30 UTC (EC2 User Guide)


def block_answer(**fields) -> dict:
    return {"CapacityReservationId": BLOCK, "ReservationType": "capacity-block", "InstanceType": "p5.48xlarge",
            "AvailabilityZone": "us-east-2a", "TotalInstanceCount": 2, "AvailableInstanceCount": 2, "State": "active",
            "StartDate": datetime(2026, 12, 1, 11, 30, tzinfo=timezone.utc), "EndDate": BLOCK_END} | fields


def block_checks(job_s: float | None, **fields) -> list[Check]:
    ec2, stub = ec2_stub()
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [block_answer(**fields)]},
                      {"CapacityReservationIds": [BLOCK]})
    stub.activate()
    s = settings(*P5_BLOCK)
    return capacity.check_capacity_block(ec2, s, job_s, NOW)


def test_a_job_that_ends_before_eks_scales_the_block_down_passes():
    """From 09:00, 60 min: done 10:00; EKS scales the group to 0 at 10:50, 40 min before the block's 11:30 end."""
    assert block_checks(3600) == [
        Check("capacity block", PASS, f"{BLOCK}: 2 x p5.48xlarge in us-east-2a, active, 2026-12-01 11:30 to 2026-12-03 "
              "11:30 UTC"),
        Check("job in the block", PASS, "predicted ~60 min, done by 2026-12-03 10:00 UTC, before EKS scales the nodes "
              "to 0 at 2026-12-03 10:50 UTC")]


def test_a_job_that_overruns_the_block_warns():
    """From 09:00, 120 min: done 11:00, after the 10:50 scale-down."""
    [_, check] = block_checks(7200)
    assert check == Check("job in the block", WARN, "the job's predicted ~120 min from 09:00 end at 2026-12-03 11:00 UTC, "
                          "after EKS scales the nodes to 0 at 2026-12-03 10:50 UTC (40 min before the block ends; EC2 ends "
                          "its instances then)", "fewer training.steps, or extend the block (aws ec2 "
                          "purchase-capacity-block-extension)")


def test_a_block_that_does_not_match_the_settings_fails_in_one_line():
    [check] = block_checks(3600, InstanceType="p4d.24xlarge", AvailabilityZone="us-east-2b", TotalInstanceCount=1)
    assert check == Check("capacity block", FAIL, f"{BLOCK}: it holds p4d.24xlarge, not p5.48xlarge; it is in us-east-2b, "
                          "not us-east-2a; it holds 1 instance(s), gpu_node_count is 2",
                          "-c gpu_instance_type=p4d.24xlarge -c gpu_availability_zone=us-east-2b")


def test_an_on_demand_reservation_is_no_capacity_block():
    [check] = block_checks(3600, ReservationType="default")
    assert (check.verdict, check.fix) == (FAIL, "-c gpu_capacity_type=on-demand")
    assert "it is an On-Demand Capacity Reservation, not a Capacity Block" in check.reason


def test_a_block_that_starts_after_the_jobs_attempts_give_up_fails():
    """2 attempts (backoff_limit 1 + 1) x pre_running_deadline_seconds 1200 = 40 min: a block starting at 11:00 is
    too late for a deploy at 09:00, one starting at 09:30 is not."""
    [late] = block_checks(3600, State="scheduled", StartDate=NOW + timedelta(hours=2), EndDate=NOW + timedelta(days=1))
    assert late.verdict == FAIL and late.reason.endswith(
        "it starts at 2026-12-03 11:00 UTC, after the job's 2 attempt(s) x pre_running_deadline_seconds would have given "
        "up (deploy from 2026-12-03 10:20 UTC)")
    soon = block_checks(3600, State="scheduled", StartDate=NOW + timedelta(minutes=30), EndDate=NOW + timedelta(days=1))
    assert [c.verdict for c in soon] == [PASS, PASS]


def test_a_scheduled_blocks_job_is_counted_from_the_blocks_start():
    """The block starts at 09:30 and ends at 11:00 (EKS scales down at 10:20): a 60 min job runs 09:30 to 10:30, past
    it, though from now (09:00) it would end at 10:00."""
    [_, check] = block_checks(3600, State="scheduled", StartDate=NOW + timedelta(minutes=30),
                              EndDate=NOW + timedelta(hours=2))
    assert check.verdict == WARN and check.reason.startswith("the job's predicted ~60 min from 09:30 end at 2026-12-03 "
                                                             "10:30 UTC, after EKS scales the nodes to 0 at 2026-12-03 "
                                                             "10:20 UTC")


def test_a_blocks_zone_is_never_kept_from_the_cache():
    """A Capacity Block's zone is a fact of the block named, not a ranking: after capacity_reservation_id moves to a
    block in us-east-2a, the zone cached for an earlier block (us-east-2b) is replaced, and auto takes us-east-2a."""
    from stacks.lookups import gpu_zones_key

    ec2, stub = ec2_stub()
    stub.add_response("describe_availability_zones", zones_answer(),
                      {"Filters": [{"Name": "zone-type", "Values": ["availability-zone"]}]})
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [block_answer()]},
                      {"CapacityReservationIds": [BLOCK]})
    stub.activate()
    key = gpu_zones_key("us-east-2", "p5.48xlarge", "capacity-block")
    cache = p5_block_offered()
    s = settings(*P5_BLOCK, "gpu_availability_zone=auto")
    check = capacity.check_zones(ec2, s, cache, context={key: {"zones": ["us-east-2b"], "basis": "an earlier block"}})
    assert cache[key]["zones"] == ["us-east-2a"]
    assert check.verdict == PASS and check.reason.endswith("; auto takes the first of us-east-2a in availability_zones")


def test_an_expired_block_fails():
    [check] = block_checks(3600, State="expired")
    assert check.verdict == FAIL and check.reason == f"{BLOCK}: its state is expired"


def test_a_job_the_planner_cannot_predict_is_said_so():
    [_, check] = block_checks(None)
    assert check.verdict == WARN and check.reason.startswith("the job's time cannot be predicted")
