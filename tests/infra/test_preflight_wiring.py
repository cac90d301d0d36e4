"""tools/preflight.py's run_checks wiring: each check gets the settings of the nodes it names, the client of its
service in the settings' region, and the market the nodes are bought on."""

from __future__ import annotations

import pytest

from stacks.context import settings_from_files
from tools import capacity_checks, preflight
from tools.preflight import PASS, Check

from tests.conftest import ROOT


class Session:
    """Clients as '<service>@<region>', so a check handed the wrong client or region shows in its arguments."""

    def client(self, service, region_name=None):
        return f"{service}@{region_name}"


@pytest.fixture
def calls(monkeypatch):
    """Every check replaced by a recorder of its arguments that passes."""
    recorded = {}

    def recorder(name):
        def check(*args, **kwargs):
            recorded.setdefault(name, []).append((args, kwargs))
            return Check(name, PASS, "stub")
        return check

    for name in ("check_region", "check_kubernetes_version", "check_offered", "check_efa", "check_vcpu_quota",
                 "check_capacity_reservation", "check_leftover_log_groups", "check_pull_through_cache_rule"):
        monkeypatch.setattr(preflight, name, recorder(name))
    for name in ("check_capacity_type", "check_zones", "spot_price_check", "check_capacity_block"):
        monkeypatch.setattr(capacity_checks, name, recorder(name))
    return recorded


def settings(*overrides: str):
    """Another region than cdk.json's, and 3 system nodes against 2 GPU nodes, so a neighbour's value shows."""
    return settings_from_files(ROOT / "cdk.json", ("region=eu-west-1", 'availability_zones=["eu-west-1a","eu-west-1b"]',
                                                   "gpu_availability_zone=eu-west-1b", "system_node_count=3",
                                                   *overrides))


@pytest.mark.parametrize("market", ["spot", "on-demand"])
def test_the_gpu_nodes_quota_is_on_their_market_and_the_system_nodes_on_demand(calls, market):
    """The system node group is On-Demand whatever gpu_capacity_type says (cdk_constructs/node_groups.py): its
    vCPUs count against the On-Demand quota, the GPU nodes' against their own market's."""
    s = settings(f"gpu_capacity_type={market}")
    preflight.run_checks(Session(), s)
    gpu, system = calls["check_vcpu_quota"]
    q, e = "service-quotas@eu-west-1", "ec2@eu-west-1"
    assert gpu == ((q, e, s.gpu_instance_type, 2, "eu-west-1", "GPU nodes", market), {})
    assert system in (((q, e, "m7i.xlarge", 3, "eu-west-1", "system nodes"), {}),
                      ((q, e, "m7i.xlarge", 3, "eu-west-1", "system nodes", "on-demand"), {}))


@pytest.mark.parametrize("market, spot_checked", [("spot", True), ("on-demand", False)])
def test_the_spot_price_is_checked_only_for_spot_gpu_nodes(calls, market, spot_checked):
    preflight.run_checks(Session(), settings(f"gpu_capacity_type={market}"))
    assert ("spot_price_check" in calls) is spot_checked


def test_the_gpu_instance_type_is_checked_in_the_gpu_zone_and_for_efa(calls):
    s = settings()
    preflight.run_checks(Session(), s)
    assert calls["check_offered"] == [(("ec2@eu-west-1", s.gpu_instance_type, "eu-west-1b"), {})]
    assert calls["check_efa"] == [(("ec2@eu-west-1", s.gpu_instance_type), {})]
    assert calls["check_region"] == [(("ec2@eu-west-1", "eu-west-1"), {})]
    assert calls["check_kubernetes_version"] == [(("eks@eu-west-1", s.kubernetes_version), {})]


def test_the_leftover_checks_read_logs_ecr_and_cloudformation(calls):
    s = settings()
    preflight.run_checks(Session(), s)
    assert calls["check_leftover_log_groups"] == [(("logs@eu-west-1", "cloudformation@eu-west-1", s), {})]
    assert calls["check_pull_through_cache_rule"] == [(("ecr@eu-west-1", "cloudformation@eu-west-1", s), {})]


def test_the_zones_check_gets_the_probe_flag_the_context_and_refresh(calls):
    s, cache, context = settings(), {}, {"held": 1}
    preflight.run_checks(Session(), s, probe=True, cache=cache, context=context, refresh=True)
    [(args, kwargs)] = calls["check_zones"]
    assert args == ("ec2@eu-west-1", s, cache, True)
    assert kwargs == {"context": context, "refresh": True}


class Identified:
    def client(self, service, region_name=None):
        class Sts:
            def get_caller_identity(self):
                return {"Account": "123456789012"}
        return Sts()


@pytest.mark.parametrize("flags, probe, refresh", [([], False, False), (["--probe"], True, False),
                                                   (["--refresh"], False, True)])
def test_main_hands_run_checks_auto_unresolved_and_its_probe_and_refresh_flags(monkeypatch, tmp_path, flags, probe,
                                                                               refresh):
    """A first deploy has no cdk.context.json: preflight is what looks auto's zone up, so it must get auto as it is
    (not a refusal); the context it reads is the file beside cdk.json."""
    import json
    import shutil

    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    monkeypatch.setattr("boto3.Session", Identified)
    seen = []
    monkeypatch.setattr(preflight, "run_checks", lambda *args: seen.append(args) or [Check("stub", PASS, "ok")])
    assert preflight.main(["--cdk-json", str(tmp_path / "cdk.json"), "-c", "gpu_availability_zone=auto", *flags]) == 0
    [(_, s, got_probe, cache, context, got_refresh)] = seen
    assert (s.gpu_availability_zone, got_probe, got_refresh, context) == ("auto", probe, refresh, {})
    key = capacity_checks.gpu_zones_key(s.region, s.gpu_instance_type, s.gpu_capacity_type)
    held = {key: {"zones": ["us-east-2b"]}}
    (tmp_path / "cdk.context.json").write_text(json.dumps(held))
    preflight.main(["--cdk-json", str(tmp_path / "cdk.json"), "-c", "gpu_availability_zone=auto", *flags])
    assert seen[-1][4] == held
