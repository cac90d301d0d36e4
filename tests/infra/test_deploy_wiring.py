"""tools/deploy.py's main wiring: gpu_availability_zone auto is left for the preflight it runs first to look up."""

from __future__ import annotations

import shutil

import boto3

from tools import deploy, preflight, watch

from tests.conftest import ROOT


def test_auto_zone_with_nothing_looked_up_yet_reaches_the_preflight_that_looks_it_up(monkeypatch, tmp_path):
    """A first deploy has no cdk.context.json: resolving auto there would refuse the deploy before preflight ranks
    the zones; deploy parses the settings with lookups left to preflight."""
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    assert not (tmp_path / "cdk.context.json").exists()
    seen = []
    monkeypatch.setattr(preflight, "main", lambda argv: seen.append(argv) or 1)  # stop right after preflight
    monkeypatch.setattr(watch, "main", lambda argv: 0)
    monkeypatch.setattr(boto3, "Session", lambda: None)
    rc = deploy.main(["--cdk-json", str(tmp_path / "cdk.json"), "-c", "gpu_availability_zone=auto"])
    assert seen == [["-c", "gpu_availability_zone=auto", "--cdk-json", str(tmp_path / "cdk.json")]]
    assert rc == 1  # preflight's failure, not 2 (settings refused)
