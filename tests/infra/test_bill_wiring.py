"""tools/bill.py's wiring: measure prices spot nodes at the spot prices it is given, the first-hour rule's boundary,
and a rerun's bill replacing the last one in the run summary."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from tools import bill
from tools.bill import InstanceLife, NodeRecord

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
ON_DEMAND = {"g6.12xlarge": 4.6016}


def test_measure_prices_a_spot_node_at_its_instance_hours_spot_price_not_on_demand():
    life = InstanceLife("i-1", "g6.12xlarge", T0, T0 + timedelta(hours=1), "spot", "us-east-2a")
    measured = bill.measure([NodeRecord("n1", "i-1", T0)], {"i-1": life}, None, ON_DEMAND, T0 + timedelta(hours=2),
                            {"i-1": [1.5]})
    assert measured.usd == pytest.approx(1.5)  # one hour at $1.50, not $4.60


@pytest.mark.parametrize("billed_s, usd", [(3599, 0.0), (3600, 1.5)])
def test_a_spot_node_ec2_interrupts_is_free_only_before_its_first_full_hour(billed_s, usd):
    """EC2 charges nothing for a Spot Instance it interrupts within the first instance-hour (Linux); a full hour
    is billed."""
    life = InstanceLife("i-1", "g6.12xlarge", T0, T0 + timedelta(seconds=billed_s), "spot", "us-east-2a", True)
    assert bill.instance_usd(life, billed_s, ON_DEMAND, {"i-1": [1.5]}) == pytest.approx(usd)


def test_a_reruns_bill_replaces_the_last_one_in_the_run_summary(tmp_path):
    (tmp_path / "run_summary.json").write_text(json.dumps({"steps": 10, "bill": {"measured_usd": 1.0}}))
    bill.add_to_run_summary(str(tmp_path), {"measured_usd": 2.0})
    assert json.loads((tmp_path / "run_summary.json").read_text()) == {"steps": 10, "bill": {"measured_usd": 2.0}}
