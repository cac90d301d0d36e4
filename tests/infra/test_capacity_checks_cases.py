"""tools/capacity_checks.py at its edges: every answer of CreateCapacityReservation that means no capacity or no
quota, the probe's stated cost, and a Capacity Block's boundaries to the minute."""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.exceptions import ClientError

from tests.infra.test_capacity_preflight import NOW, block_checks
from tools import capacity_checks as capacity
from tools.verdicts import PASS, WARN


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
