"""tools/bill.py at its edges: when a node counts as Ready (its boot phase ends), and boto's naive times."""

from __future__ import annotations

from datetime import datetime, timezone

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
