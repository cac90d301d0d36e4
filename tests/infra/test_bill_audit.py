"""tools/bill.py: the measured bill into an S3 run's summary, beside the trainer's figures, and the bill line of a
Capacity Block run."""

from __future__ import annotations

import io
import json

from tools import bill


def test_the_bill_goes_into_the_s3_runs_own_summary_beside_its_figures(monkeypatch):
    import boto3

    stored = {"runs/r1/run_summary.json": json.dumps({"final_loss": 1.25}).encode()}

    class S3:
        def get_object(self, Bucket, Key):
            assert Bucket == "bucket"
            return {"Body": io.BytesIO(stored[Key])}

        def put_object(self, Bucket, Key, Body):
            stored[f"{Bucket}:{Key}"] = Body

    monkeypatch.setattr(boto3, "client", lambda service: S3())
    bill.add_to_run_summary("s3://bucket/runs/r1/", {"measured_usd": 3.41})
    assert json.loads(stored["bucket:runs/r1/run_summary.json"]) == {"final_loss": 1.25, "bill": {"measured_usd": 3.41}}


def test_a_capacity_block_runs_bill_line_says_its_instances_were_paid_with_the_block():
    node = bill.NodeBill("ip-10-0-1-5", "p5.48xlarge", {name: 60.0 for name in bill.PHASES}, 300.0, 0.0, "capacity-block")
    line = bill.bill_line(bill.Bill([node]), None)
    assert line == ("measured GPU bill: $0.00 for 1 node(s) (minutes per node: boot 1.0, image pull 1.0, training 1.0, "
                    "TTL 1.0, scale-down 1.0) (Capacity Block instances: paid with the block)")
