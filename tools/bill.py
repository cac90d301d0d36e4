"""The bill of a run, measured: each GPU node's real lifetime and what EC2 charges for it.

While it follows a job, the watch records what it sees of the GPU nodes (NodeRecorder: the node objects'
creation, Ready and deletion; the first container started on each and the last pod's end) and of their
instances (EC2: launch time, state transitions). After the job, `measure` splits each instance's billed
time into boot (running to Ready), image pull (Ready to the first container), training (to the job's
end), TTL (to the last pod's end: KubeRay deleting the finished cluster) and scale-down (to the instance
leaving running), and prices it at the instance type's on-demand rate.

EC2's rules, from its documentation: Linux on-demand instances bill per second with a 60-second minimum
(aws.amazon.com/ec2/pricing/on-demand, "Per second billing"); an instance bills only while running, not
while pending, shutting-down or terminated (EC2 User Guide, "Instance state changes", the billing column).
A spot instance pays the spot price in effect at the start of each instance-hour, billed per second (Amazon EC2 Spot
whitepaper, "How Spot Instances work"; the 2017 pricing change), and nothing for a first hour that EC2 interrupted
(EC2 User Guide, "Billing for interrupted Spot Instances"). A Capacity Block's instances were paid for with the
block (EC2 User Guide, "Capacity Blocks pricing and billing"): they add nothing per run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

MINIMUM_BILLED_S = 60
HOUR_S = 3600
# StateReason.Code of a spot instance EC2 reclaimed (EC2 User Guide, "Find interrupted Spot Instances").
SPOT_TERMINATION = "Server.SpotInstanceTermination"
PHASES = ("boot", "image pull", "training", "TTL", "scale-down")
# EC2's StateTransitionReason for a terminated or stopped instance: "User initiated (2025-06-01 10:31:12 GMT)".
_LEFT_RUNNING = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:GMT|UTC)\)")


def timestamp(text: str | datetime | None) -> datetime | None:
    """A Kubernetes or EC2 time (RFC 3339 text, or boto's datetime) as an aware UTC datetime."""
    if text is None or isinstance(text, datetime):
        return text if text is None or text.tzinfo else text.replace(tzinfo=timezone.utc)
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class NodeRecord:
    """What the watch saw of one GPU node."""

    name: str
    instance_id: str
    created: datetime
    ready: datetime | None = None
    first_container: datetime | None = None
    last_pod_end: datetime | None = None
    deleted: datetime | None = None


class NodeRecorder:
    """Keeps each GPU node's timestamps from the watch's polls: node objects vanish once deleted, and
    pods with them, so each is read while it exists."""

    def __init__(self):
        self.nodes: dict[str, NodeRecord] = {}

    def observe(self, nodes: list[dict], pods: list[dict], now: datetime) -> None:
        """One poll: the GPU nodes' objects and the job's pods (Kubernetes' serialized form)."""
        for node in nodes:
            meta = node["metadata"]
            record = self.nodes.setdefault(meta["name"], NodeRecord(
                meta["name"], node.get("spec", {}).get("providerID", "").rsplit("/", 1)[-1], timestamp(meta["creationTimestamp"])))
            for condition in node.get("status", {}).get("conditions", []):
                if condition["type"] == "Ready" and condition["status"] == "True" and record.ready is None:
                    record.ready = timestamp(condition["lastTransitionTime"])
            record.deleted = timestamp(meta.get("deletionTimestamp")) or record.deleted
        for pod in pods:
            record = self.nodes.get(pod.get("spec", {}).get("nodeName"))
            if record is None:
                continue
            for status in pod.get("status", {}).get("containerStatuses") or []:
                started = timestamp((status.get("state", {}).get("running") or {}).get("startedAt"))
                if started and (record.first_container is None or started < record.first_container):
                    record.first_container = started
            # A pod being deleted ends at its deletionTimestamp; a live one at least lasts until this poll.
            ended = timestamp(pod["metadata"].get("deletionTimestamp")) or now
            if record.last_pod_end is None or ended > record.last_pod_end:
                record.last_pod_end = ended


@dataclass
class InstanceLife:
    instance_id: str
    instance_type: str
    running_from: datetime
    running_until: datetime | None
    """None while it still runs."""
    lifecycle: str | None = None
    """EC2's InstanceLifecycle: spot, capacity-block, or None (on-demand)."""
    zone: str = ""
    interrupted: bool = False
    """EC2 reclaimed it (a spot interruption)."""


def instance_lives(ec2, instance_ids: list[str], pending_seen: dict[str, datetime] | None = None) -> dict[str, InstanceLife]:
    """Each instance's billed span from EC2: from its launch time (or from the watch's last sighting of it
    pending, when later: pending is not billed) until the time its state-transition reason gives."""
    lives, pending_seen = {}, pending_seen or {}
    if not instance_ids:
        return lives
    pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=instance_ids)
    for instance in (i for page in pages for r in page["Reservations"] for i in r["Instances"]):
        launched = timestamp(instance["LaunchTime"])
        pending = pending_seen.get(instance["InstanceId"])
        left = None
        if instance["State"]["Name"] not in ("pending", "running"):
            found = _LEFT_RUNNING.search(instance.get("StateTransitionReason", ""))
            left = datetime.fromisoformat(found.group(1)).replace(tzinfo=timezone.utc) if found else None
        lives[instance["InstanceId"]] = InstanceLife(
            instance["InstanceId"], instance["InstanceType"], max(launched, pending) if pending else launched, left,
            instance.get("InstanceLifecycle"), instance.get("Placement", {}).get("AvailabilityZone", ""),
            instance.get("StateReason", {}).get("Code") == SPOT_TERMINATION)
    return lives


def spot_hour_prices(ec2, lives: dict[str, InstanceLife], now: datetime) -> dict[str, list[float]]:
    """Per spot instance, the Linux/UNIX spot price of its type and zone in effect at the start of each of its
    instance-hours (DescribeSpotPriceHistory from that moment: its first record is the price then in effect)."""
    prices = {}
    for life in lives.values():
        if life.lifecycle != "spot":
            continue
        until = life.running_until or now
        hours = max(1, -(-int((until - life.running_from).total_seconds()) // HOUR_S))
        prices[life.instance_id] = []
        for hour in range(hours):
            start = life.running_from + timedelta(seconds=hour * HOUR_S)
            history = ec2.describe_spot_price_history(
                InstanceTypes=[life.instance_type], ProductDescriptions=["Linux/UNIX"], AvailabilityZone=life.zone,
                StartTime=start, EndTime=start)["SpotPriceHistory"]
            in_effect = [h for h in history if timestamp(h["Timestamp"]) <= start] or history
            if not in_effect:
                break  # EC2 keeps 90 days of history; a price it no longer has is not guessed
            prices[life.instance_id].append(float(max(in_effect, key=lambda h: timestamp(h["Timestamp"]))["SpotPrice"]))
    return prices


def instance_usd(life: InstanceLife, billed_s: float, usd_per_hour: dict[str, float],
                 hour_prices: dict[str, list[float]]) -> float:
    """What EC2 charges for one instance's billed seconds, by how it was bought."""
    if life.lifecycle == "capacity-block":
        return 0.0
    if life.lifecycle != "spot":
        return billed_s * usd_per_hour.get(life.instance_type, 0.0) / HOUR_S
    if life.interrupted and billed_s < HOUR_S:
        return 0.0
    hourly = hour_prices.get(life.instance_id)
    if not hourly:  # no price known: the on-demand price, spot's default maximum
        return billed_s * usd_per_hour.get(life.instance_type, 0.0) / HOUR_S
    hours = [min(HOUR_S, billed_s - k * HOUR_S) for k in range(len(hourly)) if billed_s > k * HOUR_S]
    return sum(price * seconds / HOUR_S for price, seconds in zip(hourly, hours))


@dataclass
class NodeBill:
    name: str
    instance_type: str
    phases_s: dict[str, float]
    billed_s: float
    usd: float
    lifecycle: str | None = None


@dataclass
class Bill:
    nodes: list[NodeBill] = field(default_factory=list)
    still_running: list[str] = field(default_factory=list)

    @property
    def usd(self) -> float:
        return sum(node.usd for node in self.nodes)


def _span(start: datetime | None, end: datetime | None) -> float:
    return max((end - start).total_seconds(), 0.0) if start and end else 0.0


def measure(records: list[NodeRecord], lives: dict[str, InstanceLife], job_end: datetime | None,
            usd_per_hour: dict[str, float], now: datetime, spot_prices: dict[str, list[float]] | None = None) -> Bill:
    """The bill of the GPU nodes: per node, its phases and its cost (an instance still running is priced up to now);
    usd_per_hour holds on-demand prices by type, spot_prices each spot instance's prices by instance-hour."""
    bill = Bill()
    for record in records:
        life = lives.get(record.instance_id)
        if life is None:
            continue
        until = life.running_until or now
        if life.running_until is None:
            bill.still_running.append(record.name)
        # Each boundary clipped into the billed span, in order: the phases then add up to it.
        marks = [life.running_from]
        for moment in (record.ready, record.first_container, job_end, record.last_pod_end):
            marks.append(min(max(moment or marks[-1], marks[-1]), until))
        marks.append(until)
        phases = {name: _span(a, b) for name, a, b in zip(PHASES, marks, marks[1:])}
        billed = max(_span(life.running_from, until), MINIMUM_BILLED_S)
        bill.nodes.append(NodeBill(record.name, life.instance_type, phases, billed,
                                   instance_usd(life, billed, usd_per_hour, spot_prices or {}), life.lifecycle))
    return bill


def bill_line(bill: Bill, estimate_usd: float | None) -> str:
    """The last line of `make watch`: measured $ and where the time went, beside the synth's estimate."""
    if not bill.nodes:
        return "measured GPU bill: no GPU node seen"
    mean = {name: sum(node.phases_s[name] for node in bill.nodes) / len(bill.nodes) / 60 for name in PHASES}
    phases = ", ".join(f"{name} {minutes:.1f}" for name, minutes in mean.items())
    line = f"measured GPU bill: ${bill.usd:.2f} for {len(bill.nodes)} node(s) (minutes per node: {phases})"
    bought = {node.lifecycle for node in bill.nodes}
    if "spot" in bought:
        line += " at the spot price in effect at each instance-hour's start"
    if "capacity-block" in bought:
        line += " (Capacity Block instances: paid with the block)"
    if bill.still_running:
        line += f", still running: {', '.join(bill.still_running)} (priced up to now)"
    if estimate_usd:
        line += f"; the synth estimated ${estimate_usd:.2f} ({estimate_error(bill.usd, estimate_usd):+.1%} of measured)"
    return line


def estimate_error(measured_usd: float, estimate_usd: float) -> float:
    """How far the estimate is off, as a share of what was measured (negative: it was low)."""
    return (estimate_usd - measured_usd) / measured_usd


def summary(bill: Bill, estimate_usd: float | None) -> dict:
    """The bill for the run summary."""
    return {"measured_usd": round(bill.usd, 4), "estimate_usd": estimate_usd,
            "error": round(estimate_error(bill.usd, estimate_usd), 4) if estimate_usd and bill.usd else None,
            "nodes": [{"name": n.name, "instance_type": n.instance_type, "billed_s": n.billed_s,
                       "usd": round(n.usd, 4), "phases_s": n.phases_s} for n in bill.nodes]}


def pending_sightings(ec2, cluster_name: str, seen: dict[str, datetime], now: datetime) -> None:
    """Note, per instance of the cluster still pending, the latest poll that saw it so (pending is not billed)."""
    filters = [{"Name": "tag:eks:cluster-name", "Values": [cluster_name]}, {"Name": "instance-state-name", "Values": ["pending"]}]
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for instance in (i for r in page["Reservations"] for i in r["Instances"]):
            seen[instance["InstanceId"]] = now


def add_to_run_summary(run: str, measured: dict) -> None:
    """The bill into the run's run_summary.json (local or s3://), beside the trainer's figures."""
    from tools.report import SUMMARY_FILE, _read

    text = _read(run, SUMMARY_FILE)
    written = json.dumps((json.loads(text) if text else {}) | {"bill": measured}, indent=1)
    if not run.startswith("s3://"):
        (Path(run).expanduser() / SUMMARY_FILE).write_text(written)
        return
    import boto3

    bucket, _, prefix = run.removeprefix("s3://").partition("/")
    boto3.client("s3").put_object(Bucket=bucket, Key=f"{prefix.rstrip('/')}/{SUMMARY_FILE}", Body=written.encode())
