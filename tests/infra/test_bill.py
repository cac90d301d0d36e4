"""The bill measured (tools/bill.py): a recorded run worked out by hand, and EC2's answers through moto."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from moto import mock_aws

from tests.conftest import DATA
from tools import bill

RECORDED = json.loads((DATA / "bill" / "recorded-run.json").read_text())
# AWS's on-demand list price of g6.12xlarge in us-east-1 (PRICES_AS_OF in the hardware table).
PRICES = {"g6.12xlarge": 4.6016}
# The synth's estimate for the default settings (README, `make synth`: "per run: ~$3.28 of GPU nodes").
ESTIMATE_USD = 3.28
AFTER = datetime(2026, 12, 5, 23, 0, tzinfo=timezone.utc)


class RecordedEc2:
    """describe_instances answering with the fixture's instances, in boto's page shape."""

    def get_paginator(self, name):
        assert name == "describe_instances"
        return self

    def paginate(self, InstanceIds):
        return [{"Reservations": [{"Instances": [i for i in RECORDED["instances"] if i["InstanceId"] in InstanceIds]}]}]


def recorded_bill() -> bill.Bill:
    recorder = bill.NodeRecorder()
    for poll in RECORDED["polls"]:
        recorder.observe(poll["nodes"], poll["pods"], bill.timestamp(poll["at"]))
    records = list(recorder.nodes.values())
    lives = bill.instance_lives(RecordedEc2(), [r.instance_id for r in records])
    return bill.measure(records, lives, bill.timestamp(RECORDED["job_end"]), PRICES, AFTER)


# Worked by hand from the fixture:
# node 1: running 22:00:20 -> Ready 22:01:50 (boot 90 s) -> container 22:04:20 (pull 150 s) -> job end 22:11:40
#   (training 440 s) -> pod deleted 22:16:40 (TTL 300 s) -> terminated 22:22:30 (scale-down 350 s): 1,330 s.
# node 2: 22:00:25 -> 22:02:00 (95) -> 22:04:40 (160) -> 22:11:40 (420) -> 22:16:40 (300) -> 22:22:40 (360): 1,335 s.
# 2,665 s x $4.6016 / 3,600 s = $3.40646; the estimate $3.28 is (3.28 - 3.40646) / 3.40646 = -3.71% of it.
def test_the_recorded_run_splits_each_node_s_time_into_its_phases():
    nodes = recorded_bill().nodes
    assert [n.phases_s for n in nodes] == [
        {"boot": 90, "image pull": 150, "training": 440, "TTL": 300, "scale-down": 350},
        {"boot": 95, "image pull": 160, "training": 420, "TTL": 300, "scale-down": 360}]
    assert [n.billed_s for n in nodes] == [1330, 1335]


def test_the_recorded_run_costs_what_ec2_charges_per_second():
    assert recorded_bill().usd == pytest.approx(3.40646, abs=1e-5)


def test_the_watch_line_gives_measured_beside_the_estimate_and_the_error():
    line = bill.bill_line(recorded_bill(), ESTIMATE_USD)
    assert line == ("measured GPU bill: $3.41 for 2 node(s) (minutes per node: boot 1.5, image pull 2.6, training 7.2, "
                    "TTL 5.0, scale-down 5.9); the synth estimated $3.28 (-3.7% of measured)")


def test_the_run_summary_gets_the_bill():
    written = bill.summary(recorded_bill(), ESTIMATE_USD)
    assert written["measured_usd"] == pytest.approx(3.4065, abs=1e-4)
    assert written["error"] == pytest.approx(-0.0371, abs=1e-4)


def life(seconds: float) -> tuple[list[bill.NodeRecord], dict]:
    start = datetime(2026, 12, 5, 22, 0, tzinfo=timezone.utc)
    records = [bill.NodeRecord("n", "i-1", created=start)]
    return records, {"i-1": bill.InstanceLife("i-1", "g6.12xlarge", start, start + timedelta(seconds=seconds))}


def test_a_node_up_40_s_bills_ec2_s_60_s_minimum():
    # 60 s x $4.6016 / 3,600 s = $0.076693.
    assert bill.measure(*life(40), None, PRICES, AFTER).usd == pytest.approx(0.076693, abs=1e-6)


def test_a_node_up_61_s_bills_61_s():
    assert bill.measure(*life(61), None, PRICES, AFTER).usd == pytest.approx(61 * 4.6016 / 3600)


@pytest.fixture(scope="module")
def ec2():
    with mock_aws():
        client = boto3.client("ec2", region_name="us-east-1")
        image = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        yield client, image


def launch(client, image: str) -> str:
    return client.run_instances(ImageId=image, InstanceType="g6.12xlarge", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]


def test_a_terminated_instance_bills_until_its_state_transition(ec2):
    client, image = ec2
    gone, _ = launch(client, image), launch(client, image)
    client.terminate_instances(InstanceIds=[gone])
    lives = bill.instance_lives(client, [gone])
    assert list(lives) == [gone]  # only the instances asked for
    ended = lives[gone].running_until
    assert ended is not None and abs((ended - lives[gone].running_from).total_seconds()) < 5


def test_a_running_instance_is_priced_up_to_now_and_named(ec2):
    client, image = ec2
    running = launch(client, image)
    lives = bill.instance_lives(client, [running])
    assert lives[running].running_until is None
    now = lives[running].running_from + timedelta(hours=1)
    measured = bill.measure([bill.NodeRecord("gpu-1", running, created=now)], lives, None, PRICES, now)
    assert measured.usd == pytest.approx(4.6016)
    assert measured.still_running == ["gpu-1"]


def test_pending_is_not_billed(ec2):
    client, image = ec2
    instance = launch(client, image)
    launched = bill.instance_lives(client, [instance])[instance].running_from
    seen_pending = launched + timedelta(seconds=20)
    assert bill.instance_lives(client, [instance], {instance: seen_pending})[instance].running_from == seen_pending


def test_the_first_container_is_the_earliest_and_a_live_pod_lasts_until_the_poll():
    recorder = bill.NodeRecorder()
    node = {"metadata": {"name": "n", "creationTimestamp": "2026-12-05T22:00:00Z"}, "spec": {"providerID": "aws:///az/i-1"}}
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n"}, "status": {"containerStatuses": [
        {"state": {"running": {"startedAt": "2026-12-05T22:05:00Z"}}},
        {"state": {"running": {"startedAt": "2026-12-05T22:04:00Z"}}}]}}
    recorder.observe([node], [pod], bill.timestamp("2026-12-05T22:10:00Z"))
    record = recorder.nodes["n"]
    assert record.instance_id == "i-1"
    assert record.first_container == bill.timestamp("2026-12-05T22:04:00Z")
    assert record.last_pod_end == bill.timestamp("2026-12-05T22:10:00Z")


def test_the_estimate_is_the_synth_s_per_run_cost(template, monkeypatch):
    """The same worked example as the review's per-run line: a 10-minute training, start 180 s + 12 GiB at 150 MiB/s
    (81.92 s), TTL 300 s, scale-down 300 s: 1461.92 s of the 2 autoscaled g6.12xlarge at $4.6016/h = $3.73732."""
    import tools.review as review

    monkeypatch.setattr(review, "training_estimate", lambda t: ("training: ...", type("E", (), {"run_s": 600.0})()))
    assert review.job_cost_usd(template.to_json()) == pytest.approx(3.73732, abs=1e-5)


def test_the_watch_prices_the_recorded_nodes_and_writes_the_bill_into_the_run_summary(tmp_path, monkeypatch):
    from stacks.settings import Settings
    from tools import watch

    settings = Settings()
    monkeypatch.chdir(tmp_path)  # no cdk.out here: no estimate to compare with
    (tmp_path / "run_summary.json").write_text(json.dumps({"final_step": 8}))
    with mock_aws():
        session = boto3.Session(region_name=settings.region)
        client = session.client("ec2", region_name=settings.region)
        image = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        instance = launch(client, image)
        client.terminate_instances(InstanceIds=[instance])
        recorder = bill.NodeRecorder()
        recorder.nodes["gpu-1"] = bill.NodeRecord("gpu-1", instance, created=datetime.now(timezone.utc))
        line = watch.measured_bill_line(session, settings, recorder, {}, {"end": None, "run": str(tmp_path)})
    # Launched and terminated within a second: EC2's 60 s minimum at $4.6016/h is $0.08.
    assert line.startswith("measured GPU bill: $0.08 for 1 node(s)")
    written = json.loads((tmp_path / "run_summary.json").read_text())
    assert written["final_step"] == 8 and written["bill"]["measured_usd"] == pytest.approx(0.0767, abs=1e-4)


# ------------------------------------------------------------------ spot and Capacity Block nodes

START = datetime(2026, 12, 5, 22, 0, tzinfo=timezone.utc)


def bought(lifecycle: str | None, seconds: float, interrupted: bool = False) -> bill.InstanceLife:
    return bill.InstanceLife("i-1", "g6.12xlarge", START, START + timedelta(seconds=seconds), lifecycle, "us-east-2a",
                             interrupted)


def test_a_spot_instance_pays_the_price_in_effect_at_the_start_of_each_instance_hour():
    """5,400 s at $1.20 for the first hour and $1.50 from the second hour's start: 1.20 + 1.50 x 0.5 = $1.95; the
    on-demand price would have been $6.90."""
    usd = bill.instance_usd(bought("spot", 5400), 5400, PRICES, {"i-1": [1.20, 1.50]})
    assert usd == pytest.approx(1.95)


def test_a_spot_instance_ec2_reclaims_in_its_first_hour_is_not_charged():
    """EC2 User Guide, "Billing for interrupted Spot Instances": Linux, interrupted by EC2 in the first hour: no charge;
    after it, the seconds used."""
    assert bill.instance_usd(bought("spot", 1800, interrupted=True), 1800, PRICES, {"i-1": [1.20]}) == 0.0
    assert bill.instance_usd(bought("spot", 5400, interrupted=True), 5400, PRICES, {"i-1": [1.20, 1.50]}) == \
        pytest.approx(1.95)
    assert bill.instance_usd(bought("spot", 1800), 1800, PRICES, {"i-1": [1.20]}) == pytest.approx(0.60)


def test_a_capacity_block_instance_adds_nothing_and_an_unpriced_spot_one_is_priced_at_on_demand():
    assert bill.instance_usd(bought("capacity-block", 3600), 3600, PRICES, {}) == 0.0
    assert bill.instance_usd(bought("spot", 3600), 3600, PRICES, {}) == pytest.approx(4.6016)


def test_the_spot_prices_are_read_for_each_instance_hour_from_the_price_history():
    """DescribeSpotPriceHistory from an hour's start lists the price then in effect first (set 21:40, before the
    22:00 start) and later changes; the one in effect at the start is taken."""
    from botocore.stub import Stubber

    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for hour, (in_effect, later) in enumerate([(1.20, 1.35), (1.50, 1.10)]):
        start = START + timedelta(hours=hour)
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"AvailabilityZone": "us-east-2a", "InstanceType": "g6.12xlarge", "ProductDescription": "Linux/UNIX",
             "SpotPrice": str(later), "Timestamp": start + timedelta(minutes=20)},
            {"AvailabilityZone": "us-east-2a", "InstanceType": "g6.12xlarge", "ProductDescription": "Linux/UNIX",
             "SpotPrice": str(in_effect), "Timestamp": start - timedelta(minutes=20)}]},
            {"InstanceTypes": ["g6.12xlarge"], "ProductDescriptions": ["Linux/UNIX"], "AvailabilityZone": "us-east-2a",
             "StartTime": start, "EndTime": start})
    stub.activate()
    lives = {"i-1": bought("spot", 5400), "i-2": bill.InstanceLife("i-2", "g6.12xlarge", START, None)}
    assert bill.spot_hour_prices(client, lives, AFTER) == {"i-1": [1.20, 1.50]}  # the on-demand i-2 needs none
    stub.assert_no_pending_responses()


def test_a_price_set_at_the_hours_start_replaces_the_one_before():
    """DescribeSpotPriceHistory returns the records within [start, end] and also the last change before start: a
    change at 22:00 sharp ($1.45) and the one it replaced at 21:40 ($1.20) both come back; 22:00's is in effect."""
    from botocore.stub import Stubber

    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        {"AvailabilityZone": "us-east-2a", "InstanceType": "g6.12xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": price, "Timestamp": when} for price, when in [("1.450000", START),
                                                                     ("1.200000", START - timedelta(minutes=20))]]})
    stub.activate()
    assert bill.spot_hour_prices(client, {"i-1": bought("spot", 1800)}, AFTER) == {"i-1": [1.45]}


def test_the_watch_line_says_the_spot_price_basis():
    node = bill.NodeBill("gpu-1", "g6.12xlarge", dict.fromkeys(bill.PHASES, 60.0), 300, 0.10, "spot")
    assert bill.bill_line(bill.Bill([node]), None).startswith(
        "measured GPU bill: $0.10 for 1 node(s) (minutes per node: boot 1.0, image pull 1.0, training 1.0, TTL 1.0, "
        "scale-down 1.0) at the spot price in effect at each instance-hour's start")


def test_how_an_instance_was_bought_and_ended_is_read_from_ec2():
    """DescribeInstances: InstanceLifecycle spot, its zone, and StateReason Server.SpotInstanceTermination when EC2
    reclaimed it (EC2 User Guide, "Find interrupted Spot Instances")."""
    reclaimed = {"InstanceId": "i-9", "InstanceType": "g6.12xlarge", "LaunchTime": START, "InstanceLifecycle": "spot",
                 "Placement": {"AvailabilityZone": "us-east-2b"}, "State": {"Name": "terminated"},
                 "StateReason": {"Code": "Server.SpotInstanceTermination"},
                 "StateTransitionReason": "Service initiated (2026-12-05 22:30:00 GMT)"}

    class Ec2:
        def get_paginator(self, name):
            return self

        def paginate(self, InstanceIds):
            return [{"Reservations": [{"Instances": [reclaimed]}]}]

    life = bill.instance_lives(Ec2(), ["i-9"])["i-9"]
    assert (life.lifecycle, life.zone, life.interrupted) == ("spot", "us-east-2b", True)
    assert life.running_until == START + timedelta(minutes=30)
