"""tools/preflight.py's paths no other test of the module ran: auto with no usable zone, a Capacity Block checked with
the job's predicted time, a CloudFormation refusal other than "does not exist", and Ctrl-C still saving the lookups."""

from __future__ import annotations

import json
import shutil

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ROOT
from tests.infra.test_preflight_wiring import Identified, Session, calls, settings  # noqa: F401 - calls is a fixture
from tools import capacity_checks, preflight
from tools.verdicts import FAIL, PASS


def auto_settings():
    """The wiring test's eu-west-1 settings with auto left unresolved, as preflight gets them."""
    from stacks.context import settings_from_files

    return settings_from_files(ROOT / "cdk.json", ("region=eu-west-1", 'availability_zones=["eu-west-1a","eu-west-1b"]',
                                                   "gpu_availability_zone=auto"), resolve_lookups=False)


def test_auto_without_a_cached_zone_in_availability_zones_fails_the_gpu_zone_and_stops(calls):  # noqa: F811
    s = auto_settings()
    key = capacity_checks.gpu_zones_key(s.region, s.gpu_instance_type, s.gpu_capacity_type)
    checks = preflight.run_checks(Session(), s, context={key: {"zones": ["eu-west-1c"], "basis": "probe"}})
    assert checks[-1].name == "gpu zone" and checks[-1].verdict == FAIL
    assert "are not in availability_zones ['eu-west-1a', 'eu-west-1b']" in checks[-1].reason
    assert "check_offered" not in calls  # nothing is checked in a zone that is not there


def test_auto_resolves_to_the_first_cached_zone_the_vpc_has_before_the_zone_checks(calls):  # noqa: F811
    s = auto_settings()
    key = capacity_checks.gpu_zones_key(s.region, s.gpu_instance_type, s.gpu_capacity_type)
    checks = preflight.run_checks(Session(), s, context={key: {"zones": ["eu-west-1c", "eu-west-1b", "eu-west-1a"]}})
    assert preflight.Check("gpu zone", PASS, "auto is eu-west-1b") in checks
    assert calls["check_offered"] == [(("ec2@eu-west-1", s.gpu_instance_type, "eu-west-1b"), {})]


def test_a_capacity_block_is_checked_with_the_jobs_predicted_time(calls, monkeypatch):  # noqa: F811
    monkeypatch.setattr(capacity_checks, "predicted_job_s", lambda s: 4321.0)
    s = settings("gpu_capacity_type=capacity-block", "gpu_instance_type=p5.48xlarge",
                 "capacity_reservation_id=cr-0123456789abcdef0")
    preflight.run_checks(Session(), s)
    assert calls["check_capacity_block"] == [(("ec2@eu-west-1", s, 4321.0), {})]
    assert "check_capacity_reservation" not in calls


class _Ecr:
    def describe_pull_through_cache_rules(self, **_):
        return {"pullThroughCacheRules": [{"upstreamRegistryUrl": "public.ecr.aws"}]}


class _Throttled:
    def describe_stack_resources(self, **_):
        raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "DescribeStackResources")


def test_a_cloudformation_refusal_other_than_a_missing_stack_is_not_read_as_no_stack():
    # Only "does not exist" means the rule cannot be the stack's own; throttling must surface (as _guarded's FAIL).
    s = settings("image_pull_through_cache=true")
    with pytest.raises(ClientError, match="Throttling"):
        preflight.check_pull_through_cache_rule(_Ecr(), _Throttled(), s)
    [check] = preflight._guarded("pull-through cache rule",
                                 lambda: preflight.check_pull_through_cache_rule(_Ecr(), _Throttled(), s))
    assert check.verdict == FAIL and check.reason == "could not check: DescribeStackResources failed with Throttling"


def test_ctrl_c_exits_130_and_still_saves_what_was_looked_up(monkeypatch, tmp_path, capsys):
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    monkeypatch.setattr("boto3.Session", Identified)

    def interrupted(session, s, probe, cache, context, refresh):
        cache["instance-type-offerings:us-east-2:g6.12xlarge"] = {"zones": ["us-east-2a"]}
        raise KeyboardInterrupt

    monkeypatch.setattr(preflight, "run_checks", interrupted)
    assert preflight.main(["--cdk-json", str(tmp_path / "cdk.json")]) == 130
    assert capsys.readouterr().err.startswith("preflight stopped (Ctrl-C); the probe cancelled the reservations")
    saved = json.loads((tmp_path / "cdk.context.json").read_text())
    assert saved["instance-type-offerings:us-east-2:g6.12xlarge"]["zones"] == ["us-east-2a"]


@pytest.mark.parametrize("operation, fix", [("CreateCapacityReservation", preflight.PROBE_FIX),
                                            ("CancelCapacityReservation", preflight.PROBE_FIX),
                                            ("CreateTags", preflight.PROBE_FIX),
                                            ("DescribeInstanceTypes", preflight.READ_FIX)])
def test_a_refused_probe_write_names_the_write_permissions_and_a_refused_read_the_read_ones(operation, fix):
    # ReadOnlyAccess grants no ec2:Create*/Cancel*: granting more read access would not fix a refused probe.
    def refused():
        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, operation)

    [check] = preflight._guarded("zones", refused)
    assert check == preflight.Check("zones", FAIL, f"could not check: {operation} failed with UnauthorizedOperation", fix)
