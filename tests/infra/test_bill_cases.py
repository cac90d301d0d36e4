"""tools/bill.py at its edges: when a node counts as Ready (its boot phase ends), and boto's naive times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tools import bill

T = "2026-12-05T22:0{}:00Z"


def node(ready: str, since: str) -> dict:
    """A GPU node as the API server serializes it, with its Ready condition."""
    return {"metadata": {"name": "gpu-1", "creationTimestamp": T.format(0)}, "spec": {"providerID": "aws:///az/i-1"},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False", "lastTransitionTime": T.format(0)},
                                      {"type": "Ready", "status": ready, "lastTransitionTime": since}]}}


def ready_after(*polls: tuple[str, str]) -> datetime | None:
    recorder = bill.NodeRecorder()
    for minute, (ready, since) in enumerate(polls, start=1):
        recorder.observe([node(ready, since)], [], bill.timestamp(T.format(minute)))
    return recorder.nodes["gpu-1"].ready


def test_a_node_whose_ready_condition_is_false_is_not_ready_yet():
    """The kubelet posts Ready=False while the node starts (CNI not up): boot ends when Ready turns True (22:03)."""
    assert ready_after(("False", T.format(1)), ("True", T.format(3))) == bill.timestamp(T.format(3))


def test_a_node_that_flaps_keeps_its_first_ready_time():
    """Ready at 22:02; a NotReady blip moves the condition's lastTransitionTime to 22:05: the boot still ended at 22:02."""
    assert ready_after(("True", T.format(2)), ("True", T.format(5))) == bill.timestamp(T.format(2))


def test_a_naive_datetime_from_boto_is_read_as_utc():
    """Aware and naive times cannot be compared: a naive one is taken as UTC, as EC2 reports its times."""
    assert bill.timestamp(datetime(2026, 12, 5, 22, 0)) == datetime(2026, 12, 5, 22, 0, tzinfo=timezone.utc)
    assert bill.timestamp(T.format(0)) == datetime(2026, 12, 5, 22, 0, tzinfo=timezone.utc)


class SpotHistory:
    """describe_spot_price_history answering, per hour's start, the records given for it."""

    def __init__(self, by_start: dict[datetime, list[tuple[str, datetime]]]):
        self.by_start = by_start

    def describe_spot_price_history(self, StartTime, **_):
        return {"SpotPriceHistory": [{"SpotPrice": price, "Timestamp": when} for price, when in self.by_start[StartTime]]}


START = datetime(2026, 12, 5, 22, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)


def spot_life(hours: float) -> bill.InstanceLife:
    return bill.InstanceLife("i-1", "g6.12xlarge", START, START + hours * HOUR, "spot", "us-east-2a")


def test_an_hour_whose_price_ec2_no_longer_has_ends_the_list_rather_than_shifting_the_later_hours():
    """Prices are by instance-hour: with the first hour's price unknown, the second's must not be taken for the first
    (the instance is then priced at on-demand, spot's default maximum)."""
    ec2 = SpotHistory({START: [], START + HOUR: [("1.50", START + HOUR)], START + 2 * HOUR: [("1.10", START + 2 * HOUR)]})
    assert bill.spot_hour_prices(ec2, {"i-1": spot_life(2.5)}, START) == {"i-1": []}

