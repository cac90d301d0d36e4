"""tools/bill.py at its edges: when a node counts as Ready, spot prices by instance-hour, nodes EC2 no longer lists,
a run with no node seen, the key the report reads, pending sightings, and boto's naive times."""

from __future__ import annotations

import json
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



def test_a_run_where_no_gpu_node_was_seen_has_no_error_figure():
    """Nothing measured ($0): the estimate's error over it is undefined, not a division by zero."""
    assert bill.summary(bill.Bill(), 3.28) == {"measured_usd": 0, "estimate_usd": 3.28, "error": None, "nodes": []}
    assert bill.bill_line(bill.Bill(), 3.28) == "measured GPU bill: no GPU node seen"


def test_a_node_ec2_does_not_describe_is_left_out_and_the_others_are_still_billed():
    """i-gone is no longer listed by EC2 (terminated long ago): the next node is measured all the same."""
    records = [bill.NodeRecord("gone", "i-gone", created=START), bill.NodeRecord("gpu-2", "i-2", created=START)]
    lives = {"i-2": bill.InstanceLife("i-2", "g6.12xlarge", START, START + HOUR)}
    measured = bill.measure(records, lives, None, {"g6.12xlarge": 4.6016}, START + 2 * HOUR)
    assert [node.name for node in measured.nodes] == ["gpu-2"] and measured.usd == 4.6016


def test_the_bill_is_written_under_the_key_the_report_reads_and_keeps_the_trainers_figures(tmp_path):
    """tools/report.py reads run_summary.json's "bill"; the trainer's own figures in the file stay."""
    (tmp_path / "run_summary.json").write_text('{"val_loss": 2.1}')
    bill.add_to_run_summary(str(tmp_path), {"measured_usd": 3.41})
    assert json.loads((tmp_path / "run_summary.json").read_text()) == {"val_loss": 2.1, "bill": {"measured_usd": 3.41}}


class Pending:
    """describe_instances' paginator answering the instances that match the filters EC2 is asked with."""

    def __init__(self, instances: list[dict]):
        self.instances, self.filters = instances, None

    def get_paginator(self, name):
        assert name == "describe_instances"
        return self

    def paginate(self, Filters):
        wanted = {f["Name"]: f["Values"] for f in Filters}
        return [{"Reservations": [{"Instances": [
            i for i in self.instances if i["State"]["Name"] in wanted["instance-state-name"]
            and i["Tags"]["eks:cluster-name"] in wanted["tag:eks:cluster-name"]]}]}]


def test_only_the_clusters_pending_instances_are_noted_as_pending():
    """Pending is not billed: a running instance, or another cluster's pending one, must not move a start."""
    ec2 = Pending([{"InstanceId": "i-1", "State": {"Name": "pending"}, "Tags": {"eks:cluster-name": "fsdp"}},
                   {"InstanceId": "i-2", "State": {"Name": "running"}, "Tags": {"eks:cluster-name": "fsdp"}},
                   {"InstanceId": "i-3", "State": {"Name": "pending"}, "Tags": {"eks:cluster-name": "other"}}])
    seen: dict = {}
    bill.pending_sightings(ec2, "fsdp", seen, START)
    assert seen == {"i-1": START}
