"""tools/bill.py's paths no other test of the module ran: a node still running named in the watch's last line, a pod
on a node that is not a GPU node, and no instance to ask EC2 about."""

from __future__ import annotations

from tools import bill


def test_a_node_still_running_is_named_in_the_watch_line_as_priced_up_to_now():
    phases = {name: 60.0 for name in bill.PHASES}
    measured = bill.Bill([bill.NodeBill("gpu-1", "g6.12xlarge", phases, 300.0, 0.3835)], still_running=["gpu-1"])
    assert bill.bill_line(measured, None) == ("measured GPU bill: $0.38 for 1 node(s) (minutes per node: boot 1.0, "
                                              "image pull 1.0, training 1.0, TTL 1.0, scale-down 1.0), still running: "
                                              "gpu-1 (priced up to now)")


def test_a_pod_on_a_node_that_is_not_recorded_changes_no_node():
    # The job's namespace may hold pods on CPU nodes (the Ray head on a system node): they say nothing of the GPU nodes.
    recorder = bill.NodeRecorder()
    node = {"metadata": {"name": "gpu-1", "creationTimestamp": "2026-12-05T22:00:00Z"},
            "spec": {"providerID": "aws:///us-east-2a/i-1"}}
    elsewhere = {"metadata": {"name": "head"}, "spec": {"nodeName": "system-1"}, "status": {"containerStatuses": [
        {"state": {"running": {"startedAt": "2026-12-05T22:01:00Z"}}}]}}
    on_gpu = {"metadata": {"name": "worker"}, "spec": {"nodeName": "gpu-1"}, "status": {"containerStatuses": [
        {"state": {"running": {"startedAt": "2026-12-05T22:04:00Z"}}}]}}
    recorder.observe([node], [elsewhere, on_gpu], bill.timestamp("2026-12-05T22:10:00Z"))
    assert list(recorder.nodes) == ["gpu-1"]
    assert recorder.nodes["gpu-1"].first_container == bill.timestamp("2026-12-05T22:04:00Z")


def test_no_instance_ids_ask_ec2_nothing():
    class Ec2:
        def get_paginator(self, name):
            raise AssertionError("DescribeInstances with no ids would list every instance of the account")

    assert bill.instance_lives(Ec2(), []) == {}
