"""tools/capacity_checks.py at its edges: every answer of CreateCapacityReservation that means no capacity or no
quota, the probe's stated cost, and a Capacity Block's boundaries to the minute."""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.exceptions import ClientError

from tests.infra.test_capacity_preflight import NOW, block_checks
from tools import capacity_checks as capacity
from tools.verdicts import FAIL, PASS, WARN


class Ec2:
    """CreateCapacityReservation refused in us-east-2a with `code`, granted (active) in us-east-2b."""

    def __init__(self, code: str):
        self.code, self.cancelled = code, []

    def create_capacity_reservation(self, AvailabilityZone, **_):
        if AvailabilityZone == "us-east-2a":
            raise ClientError({"Error": {"Code": self.code, "Message": "no"}}, "CreateCapacityReservation")
        return {"CapacityReservation": {"CapacityReservationId": "cr-b", "State": "active"}}

    def cancel_capacity_reservation(self, CapacityReservationId):
        self.cancelled.append(CapacityReservationId)

    def describe_capacity_reservations(self, **_):
        return {"CapacityReservations": []}


@pytest.mark.parametrize("code", [
    # EC2 API Reference, "Error codes": no capacity there now ...
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
    # ... or not within the account's quota.
    "InstanceLimitExceeded", "VcpuLimitExceeded", "ReservationCapacityExceeded",
])
def test_a_zone_without_capacity_or_quota_is_named_with_ec2s_code_and_the_probe_goes_on(code):
    ec2 = Ec2(code)
    found = capacity.probe_zones(ec2, "g6.12xlarge", ["us-east-2a", "us-east-2b"], 2, sleep=lambda s: None)
    assert found == {"us-east-2a": code, "us-east-2b": None} and ec2.cancelled == ["cr-b"]


def test_any_other_refusal_stops_the_probe():
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        capacity.probe_zones(Ec2("UnauthorizedOperation"), "g6.12xlarge", ["us-east-2a"], 2, sleep=lambda s: None)


def test_the_probe_states_its_cost_for_every_zone_and_node():
    """3 zones x 2 nodes x $4.6016/h for a minute = $0.46; EC2 settles a pending one within 10 polls x 3 s."""
    line = capacity.probe_cost_line("g6.12xlarge", ["us-east-2a", "us-east-2b", "us-east-2c"], 2)
    assert line.endswith("(seconds; up to 30 s while EC2 settles a pending one): at most $0.46 if each lived a minute")
    assert "of 2 x g6.12xlarge" in line


def test_a_job_that_ends_exactly_when_eks_scales_the_block_down_passes():
    """From 09:00, 110 min: done at 10:50, the scale-down itself (40 min before the 11:30 end)."""
    assert [c.verdict for c in block_checks(110 * 60)] == [PASS, PASS]
    assert [c.verdict for c in block_checks(110 * 60 + 60)] == [PASS, WARN]


def test_a_block_that_starts_exactly_when_the_attempts_give_up_is_in_time():
    """2 attempts x 1200 s = 40 min: a block starting at 09:40 for a deploy at 09:00 is still caught."""
    start = NOW + timedelta(minutes=40)
    assert [c.verdict for c in block_checks(60, State="scheduled", StartDate=start, EndDate=NOW + timedelta(days=1))] == [
        PASS, PASS]
    [late] = block_checks(60, State="scheduled", StartDate=start + timedelta(minutes=1), EndDate=NOW + timedelta(days=1))
    assert late.reason.endswith("(deploy from 2026-12-03 09:01 UTC)")


class Recording(Ec2):
    """Ec2 granting every zone, keeping what the probe asked for."""

    def __init__(self, states: list[str] | None = None):
        super().__init__("none")
        self.asked, self.states, self.sleeps = [], states or [], 0

    def create_capacity_reservation(self, **asked):
        self.asked.append(asked)
        return {"CapacityReservation": {"CapacityReservationId": f"cr-{len(self.asked)}",
                                        "State": self.states.pop(0) if self.states else "active"}}

    def describe_capacity_reservations(self, CapacityReservationIds=None, **_):
        if CapacityReservationIds:
            return {"CapacityReservations": [{"State": self.states.pop(0)}]}
        return {"CapacityReservations": []}


def test_the_probe_asks_each_zone_for_the_jobs_nodes_under_a_token_of_its_own():
    """gpu_node_count instances in one zone, open-ended (EndDateType limited needs an EndDate), tagged; EC2 returns
    the first reservation again for a repeated ClientToken (idempotency), so each zone needs its own."""
    ec2 = Recording()
    capacity.probe_zones(ec2, "g6.12xlarge", ["us-east-2a", "us-east-2b"], 2, token="t", sleep=lambda s: None)
    assert [(a["AvailabilityZone"], a["InstanceCount"], a["EndDateType"]) for a in ec2.asked] == [
        ("us-east-2a", 2, "unlimited"), ("us-east-2b", 2, "unlimited")]
    assert len({a["ClientToken"] for a in ec2.asked}) == 2
    assert all(a["TagSpecifications"][0]["Tags"] == [{"Key": capacity.PROBE_TAG, "Value": "t"}] for a in ec2.asked)


def test_a_pending_reservation_that_fails_is_no_capacity_after_one_wait():
    """pending, then failed at the first poll: EC2 has settled it; the probe waits no more and cancels nothing."""
    sleeps = []
    ec2 = Recording(["pending", "failed"])
    assert capacity.probe_zones(ec2, "g6.12xlarge", ["us-east-2a"], 2, sleep=sleeps.append) == {
        "us-east-2a": "reservation failed"}
    assert sleeps == [capacity.SETTLE_INTERVAL_S] and ec2.cancelled == []


class Scores:
    def __init__(self):
        self.asked = None

    def get_spot_placement_scores(self, **asked):
        self.asked = asked
        return {"SpotPlacementScores": [{"AvailabilityZoneId": "use2-az1", "Score": 9},
                                        {"AvailabilityZoneId": "use2-az3", "Score": 3}]}

    def describe_availability_zones(self):
        return {"AvailabilityZones": [{"ZoneName": "us-east-2a", "ZoneId": "use2-az1"},
                                      {"ZoneName": "us-east-2c", "ZoneId": "use2-az3"}]}


def test_spot_scores_are_asked_for_the_jobs_nodes_in_one_zone_and_named_by_zone():
    """Zone ids differ between accounts (use2-az1 is not us-east-2a everywhere): the scores are mapped to this
    account's zone names, for gpu_node_count nodes all in one zone (the placement group)."""
    from tests.infra.test_capacity_preflight import settings

    ec2 = Scores()
    assert capacity.spot_scores(ec2, settings("gpu_capacity_type=spot")) == {"us-east-2a": 9, "us-east-2c": 3}
    assert (ec2.asked["TargetCapacity"], ec2.asked["SingleAvailabilityZone"]) == (2, True)


def test_a_blocks_job_time_counts_the_nodes_start_before_the_steps(monkeypatch):
    """The GPU nodes' boot (180 s) and image pull (12 GiB at 150 MiB/s: 81.9 s), then steps x the predicted step."""
    from tests.infra.test_capacity_preflight import settings

    monkeypatch.setattr("stacks.settings.planned_trainer_options", lambda s: ({"predicted_step_seconds": 2.0}, None))
    s = settings()
    assert capacity.predicted_job_s(s) == pytest.approx(180 + 12 * 1024 / 150 + s.training.steps * 2.0)


def test_the_spot_price_is_the_gpu_zones_not_the_cheapest():
    """The nodes run in gpu_availability_zone (us-east-2a): its $1.90, 41% of on-demand, not us-east-2b's $1.40."""
    from tests.infra.test_capacity_preflight import settings

    cache = {"spot-price:us-east-2:g6.12xlarge": {"zones": {"us-east-2a": 1.90, "us-east-2b": 1.40}}}
    check = capacity.spot_price_check(settings("gpu_capacity_type=spot"), cache)
    assert check.reason.startswith("g6.12xlarge in us-east-2a: $1.9000/h now, 41% of on-demand $4.6016/h")


def test_a_gpu_zone_scored_as_high_as_the_best_is_not_warned_about():
    """us-east-2a and us-east-2c both score 9; c ranks first on price, but a is no worse placed: no warning."""
    from tests.infra.test_capacity_preflight import spot_zones

    check, _ = spot_zones({"us-east-2a": 9, "us-east-2b": 3, "us-east-2c": 9}, zone="us-east-2a")
    assert check.verdict == PASS


def test_a_zone_ec2_left_out_of_its_scores_ranks_last_whatever_its_price():
    """EC2 returns its top scores only: us-east-2b, unscored, goes last though it is the cheapest ($1.40)."""
    from tests.infra.test_capacity_preflight import spot_zones

    _, cache = spot_zones({"us-east-2a": 2, "us-east-2c": 1}, zone="auto")
    assert cache["gpu-zones:us-east-2:g6.12xlarge:spot"]["zones"] == ["us-east-2a", "us-east-2c", "us-east-2b"]


def test_auto_keeps_the_first_kept_zone_that_availability_zones_has():
    """The kept ranking starts with us-east-2c, which the VPC (availability_zones us-east-2a, us-east-2b) has no subnet
    in: auto's zone is us-east-2a, and a fresh ranking with us-east-2a first agrees."""
    from tests.infra.test_capacity_preflight import settings

    s = settings("gpu_availability_zone=auto")
    held = {"zones": ["us-east-2c", "us-east-2a"], "basis": "probe", "as_of": "2026-12-01T09:00:00Z"}
    check = capacity._auto_zone(s, "zones", ["us-east-2a", "us-east-2c"], held, "gpu-zones:us-east-2:g6.12xlarge:on-demand")
    assert check.verdict == PASS and "auto keeps us-east-2a" in check.reason


class Block(Ec2):
    """The region's zones, and a Capacity Block in us-east-2b."""

    def describe_availability_zones(self, **_):
        return {"AvailabilityZones": [{"ZoneName": z} for z in ("us-east-2a", "us-east-2b", "us-east-2c")]}

    def describe_capacity_reservations(self, **_):
        return {"CapacityReservations": [{"AvailabilityZone": "us-east-2b"}]}


def test_a_gpu_zone_outside_the_capacity_blocks_fails():
    """A block launches in its own zone only: nodes asked for elsewhere never start (a FAIL, not a WARN)."""
    from tests.infra.test_capacity_preflight import P5_BLOCK, p5_block_offered, settings

    s = settings(*P5_BLOCK)
    cache = p5_block_offered()
    check = capacity.check_zones(Block("none"), s, cache)
    assert check.verdict == FAIL and check.fix == "-c gpu_availability_zone=us-east-2b (or auto)"
