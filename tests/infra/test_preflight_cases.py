"""tools/preflight.py: a WARN is shown with its fix yet does not stop the deploy (only a FAIL exits 1); EFA, reservation
and quota checks at their edges."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import ROOT
from tools import preflight
from tools.preflight import FAIL, PASS, WARN, Check


def test_the_table_shows_the_fix_under_a_warning_too():
    table = preflight.format_table([Check("spot price", WARN, "no spot price in us-east-2a", "choose a zone")])
    assert table.splitlines() == ["WARN  spot price  no spot price in us-east-2a", "                  fix: choose a zone"]


class Session:
    """boto3.Session with a caller identity and nothing else: the checks themselves are replaced."""

    def client(self, name, **_):
        assert name == "sts"
        return self

    def get_caller_identity(self):
        return {"Account": "123456789012"}


@pytest.mark.parametrize("verdicts,code,tally", [
    ((PASS, WARN), 0, "0 FAIL, 1 WARN, 1 PASS"),
    ((WARN, FAIL, PASS), 1, "1 FAIL, 1 WARN, 1 PASS"),
])
def test_only_a_fail_exits_one(verdicts, code, tally, monkeypatch, tmp_path, capsys):
    """`make deploy` runs preflight first and stops on its exit status: a WARN (a zone scoring below another, a
    spot price EC2 does not list) is for the user to weigh, not a stop."""
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    monkeypatch.setattr("boto3.Session", Session)
    monkeypatch.setattr(preflight, "run_checks",
                        lambda *a, **k: [Check(f"check {i}", v, "reason", "fix") for i, v in enumerate(verdicts)])
    assert preflight.main(["--cdk-json", str(tmp_path / "cdk.json")]) == code
    assert capsys.readouterr().out.splitlines()[-1] == tally


def test_an_efa_count_above_the_tables_warns_too():
    """EC2 says 2 interfaces for a g6.12xlarge, the table 1: the launch template would leave one unused; either way
    round, the table is wrong."""
    from tests.infra.test_preflight import stubbed_ec2

    response = {"InstanceTypes": [{"InstanceType": "g6.12xlarge",
                                   "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 2}}}]}
    assert preflight.check_efa(stubbed_ec2("describe_instance_types", response), "g6.12xlarge").verdict == WARN


@pytest.mark.parametrize("state", ["cancelled", "pending", "failed"])
def test_a_reservation_that_is_not_active_asks_for_an_active_one(state):
    """Its type and zone are no fix while it cannot launch anything."""
    from tests.infra.test_preflight import reservation, settings, stubbed_reservation

    [check] = preflight.check_capacity_reservation(stubbed_reservation(reservation(State=state)),
                                                   settings("capacity_reservation_id=cr-0123456789abcdef0"))
    assert (check.verdict, check.fix) == (FAIL, "use an active reservation")


def test_a_capacity_blocks_nodes_are_not_held_to_the_on_demand_quota():
    """A Capacity Block is bought with its own limits: no quota is read (no AWS client is even given)."""
    check = preflight.check_vcpu_quota(None, None, "p5.48xlarge", 2, "us-east-2", "GPU nodes", "capacity-block")
    assert check.verdict == PASS and check.reason.endswith("the On-Demand vCPU quota is not checked")
