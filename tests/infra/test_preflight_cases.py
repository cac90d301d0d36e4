"""tools/preflight.py: a WARN is shown with its fix yet does not stop the deploy; only a FAIL exits 1."""

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
