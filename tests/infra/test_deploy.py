"""`make deploy` gives the deployer cluster access when admin_principal_arn is unset (tools/deploy.py)."""

from __future__ import annotations

import pytest

from stacks.context import settings_from_files
from tests.conftest import ROOT
from tools.deploy import admin_context, endpoint_context

SESSION = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_0a1b/alice@example.com"
FULL_ROLE = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_0a1b"


def test_assumed_role_becomes_the_roles_full_arn_from_iam():
    args, note = admin_context(settings_from_files(ROOT / "cdk.json"), SESSION,
                               lambda name: FULL_ROLE if name == "AWSReservedSSO_Admin_0a1b" else None)
    assert args == ["-c", f"admin_principal_arn={FULL_ROLE}"]
    assert note == f"cluster admin: {FULL_ROLE} (your role, from {SESSION})"


def test_without_iam_access_the_role_arn_has_no_path_and_says_so():
    args, note = admin_context(settings_from_files(ROOT / "cdk.json"), SESSION, lambda name: None)
    assert args == ["-c", "admin_principal_arn=arn:aws:iam::123456789012:role/AWSReservedSSO_Admin_0a1b"]
    assert "GetRole was refused" in note


def test_an_iam_user_is_used_as_it_is():
    user = "arn:aws:iam::123456789012:user/ci"
    assert admin_context(settings_from_files(ROOT / "cdk.json"), user, lambda name: None)[0] == [
        "-c", f"admin_principal_arn={user}"]


def test_an_explicit_setting_wins():
    s = settings_from_files(ROOT / "cdk.json", ["admin_principal_arn=arn:aws:iam::123456789012:role/platform"])
    assert admin_context(s, SESSION, lambda name: pytest.fail("IAM must not be asked")) == ([], None)


def test_a_federated_user_is_refused_with_the_way_out():
    from stacks.settings import SettingsError

    with pytest.raises(SettingsError, match="is a federated-user, which EKS access entries do not take"):
        admin_context(settings_from_files(ROOT / "cdk.json"), "arn:aws:sts::123456789012:federated-user/bob", lambda n: None)


# ------------------------------------------------------------------ the endpoint opens to the deployer only


def test_unset_endpoint_cidrs_become_the_deployers_address():
    args, note = endpoint_context(settings_from_files(ROOT / "cdk.json"), lambda: "52.94.236.248\n")
    assert args == ["-c", "endpoint_public_cidrs=52.94.236.248/32"]
    assert note.startswith("EKS API endpoint: public access from 52.94.236.248/32 only")


def test_explicit_cidrs_are_kept_even_when_open():
    s = settings_from_files(ROOT / "cdk.json", ["endpoint_public_cidrs=0.0.0.0/0"])
    assert endpoint_context(s, lambda: pytest.fail("the check service must not be asked")) == ([], None)


def test_a_private_endpoint_needs_no_address():
    s = settings_from_files(ROOT / "cdk.json", ["endpoint_access=private"])
    assert endpoint_context(s, lambda: pytest.fail("the check service must not be asked")) == ([], None)


@pytest.mark.parametrize("answer,message", [
    ("<html>error</html>", "cannot learn your egress address"),
    ("10.1.2.3", "not a public address"),
])
def test_an_unusable_answer_stops_the_deploy(answer, message):
    with pytest.raises(OSError, match=message):
        endpoint_context(settings_from_files(ROOT / "cdk.json"), lambda: answer)


def test_an_unreachable_check_service_stops_the_deploy():
    def unreachable():
        raise OSError("timed out")

    with pytest.raises(OSError, match=r"cannot learn your egress address from https://checkip.amazonaws.com \(timed out\)"):
        endpoint_context(settings_from_files(ROOT / "cdk.json"), unreachable)


# ------------------------------------------------------------------ the whole of `make deploy`


class _Session:
    """boto3.Session for main(): an SSO identity, and IAM's answer for its role."""

    def client(self, service, **_):
        import types

        return types.SimpleNamespace(get_caller_identity=lambda: {"Arn": SESSION},
                                     get_role=lambda RoleName: {"Role": {"Arn": FULL_ROLE}})


def _deploy(monkeypatch, preflight_rc: int, diff: bool = False) -> tuple[int, list[str]]:
    import types

    import boto3

    from tools import deploy, preflight, watch

    calls = []
    monkeypatch.setattr(preflight, "main", lambda argv: calls.append("preflight") or preflight_rc)
    monkeypatch.setattr(watch, "main", lambda argv: calls.append("watch") or 0)
    monkeypatch.setattr(boto3, "Session", _Session)
    monkeypatch.setattr(deploy, "egress_ip_from_checkip", lambda: "52.94.76.10\n")  # a public address
    monkeypatch.setattr(deploy.subprocess, "run", lambda command, **_: calls.append(" ".join(command[:2]))
                        or types.SimpleNamespace(returncode=0))
    rc = deploy.main(["--cdk", "cdk", "--cdk-json", str(ROOT / "cdk.json")] + (["--diff"] if diff else []))
    return rc, calls


def test_make_deploy_runs_preflight_first_and_stops_when_it_fails(monkeypatch):
    assert _deploy(monkeypatch, preflight_rc=1) == (1, ["preflight"])  # nothing deployed, nothing billed
    assert _deploy(monkeypatch, preflight_rc=0) == (0, ["preflight", "cdk deploy", "watch"])


def test_make_diff_deploys_nothing_and_needs_no_preflight(monkeypatch):
    assert _deploy(monkeypatch, preflight_rc=1, diff=True) == (0, ["cdk diff"])


def test_the_makefiles_deploy_target_is_the_tool_that_runs_preflight():
    recipe = (ROOT / "Makefile").read_text().split("\ndeploy:", 1)[1].split("\n\n", 1)[0]
    assert "$(PY) -m tools.deploy --cdk $(CDK) $(CDK_ARGS)" in recipe and "--diff" not in recipe


@pytest.mark.parametrize("target", ["deploy", "preflight"])
def test_refresh_1_reaches_preflight_from_both_make_targets(target):
    recipe = (ROOT / "Makefile").read_text().split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
    assert "$(if $(REFRESH), --refresh)" in recipe


def test_deploy_lets_preflight_rank_the_zones_again_only_when_asked(monkeypatch):
    # Preflight keeps auto's cached zone unless --refresh (the node group's Subnets are create-only).
    import types

    import boto3

    from tools import deploy, preflight, watch

    seen = []
    monkeypatch.setattr(preflight, "main", lambda argv: seen.append(argv) or 1)
    monkeypatch.setattr(watch, "main", lambda argv: 0)
    monkeypatch.setattr(boto3, "Session", lambda: types.SimpleNamespace())
    for extra in ([], ["--refresh"]):
        deploy.main(["--cdk-json", str(ROOT / "cdk.json"), *extra])
    assert [argv[-1] for argv in seen] == [str(ROOT / "cdk.json"), "--refresh"]


# ------------------------------------------------------------------ what `make deploy` runs, in full

def test_an_unreachable_check_service_names_the_setting_to_use_instead():
    def unreachable():
        raise OSError("timed out")

    with pytest.raises(OSError, match=r"^cannot learn your egress address from https://checkip\.amazonaws\.com "
                                      r"\(timed out\); set -c endpoint_public_cidrs=<your CIDR>, or 0\.0\.0\.0/0 on "
                                      r"purpose$"):
        endpoint_context(settings_from_files(ROOT / "cdk.json"), unreachable)


def test_the_role_is_looked_up_in_iam_by_its_name():
    from tools.deploy import role_arn_from_iam

    asked = []

    class Session:
        def client(self, service):
            asked.append(service)
            return type("Iam", (), {"get_role": lambda self, RoleName: asked.append(RoleName) or {"Role": {"Arn": "arn"}}})()

    assert role_arn_from_iam(Session())("AWSReservedSSO_Admin_0a1b") == "arn"
    assert asked == ["iam", "AWSReservedSSO_Admin_0a1b"]


def _recorded_deploy(monkeypatch, cdk_rc: int = 0, sts=None, egress: str = "52.94.76.10\n") -> tuple[int, dict]:
    """main() with every outside call recorded: preflight's and watch's arguments, the CDK command and its folder."""
    import types

    import boto3

    from tools import deploy, preflight, watch

    seen = {}
    monkeypatch.setattr(preflight, "main", lambda argv: seen.update(preflight=argv) or 0)
    monkeypatch.setattr(watch, "main", lambda argv: seen.update(watch=argv) or 0)

    class Session(_Session):
        def client(self, service, **kwargs):
            seen.setdefault("clients", []).append((service, kwargs))
            return sts if (sts and service == "sts") else super().client(service)

    monkeypatch.setattr(boto3, "Session", Session)
    monkeypatch.setattr(deploy, "egress_ip_from_checkip", lambda: egress)
    monkeypatch.setattr(deploy.subprocess, "run", lambda command, cwd: seen.update(cdk=command, cwd=cwd)
                        or types.SimpleNamespace(returncode=cdk_rc))
    return deploy.main(["--cdk", "cdk", "--cdk-json", str(ROOT / "cdk.json"), "-c", "gpu_node_count=2"]), seen


ADDED = ["-c", f"admin_principal_arn={FULL_ROLE}", "-c", "endpoint_public_cidrs=52.94.76.10/32"]


def test_make_deploy_runs_cdk_deploy_and_the_watch_with_the_filled_in_settings(monkeypatch, capsys):
    rc, seen = _recorded_deploy(monkeypatch)
    common = ["-c", "gpu_node_count=2", "--cdk-json", str(ROOT / "cdk.json")]
    assert rc == 0 and seen["preflight"] == common
    assert seen["clients"][0] == ("sts", {"region_name": settings_from_files(ROOT / "cdk.json").region})
    assert seen["cdk"] == ["cdk", "deploy", "--require-approval", "broadening", "EksFsdpEfa", "-c", "gpu_node_count=2",
                           *ADDED]
    assert seen["cwd"] == ROOT
    assert seen["watch"] == common + ADDED
    assert capsys.readouterr().out.splitlines() == [
        f"cluster admin: {FULL_ROLE} (your role, from {SESSION})",
        "EKS API endpoint: public access from 52.94.76.10/32 only (your egress address), and private access from the VPC"]


def test_a_failed_cdk_deploy_stops_before_the_watch(monkeypatch, capsys):
    rc, seen = _recorded_deploy(monkeypatch, cdk_rc=3)
    assert rc == 3 and "watch" not in seen
    assert capsys.readouterr().err == "error: cdk deploy exited 3\n"


def test_no_aws_identity_stops_the_deploy_with_the_first_line_of_the_error(monkeypatch, capsys):
    from botocore.exceptions import NoCredentialsError

    def no_identity():
        raise NoCredentialsError()

    import types

    rc, seen = _recorded_deploy(monkeypatch, sts=types.SimpleNamespace(get_caller_identity=no_identity))
    assert rc == 2 and "cdk" not in seen
    assert capsys.readouterr().err == "error: cannot read your AWS identity: Unable to locate credentials\n"


def test_an_unusable_egress_address_stops_the_deploy(monkeypatch, capsys):
    rc, seen = _recorded_deploy(monkeypatch, egress="10.1.2.3")
    assert rc == 2 and "cdk" not in seen
    assert capsys.readouterr().err == ("error: https://checkip.amazonaws.com answered 10.1.2.3, not a public address; set "
                                       "-c endpoint_public_cidrs=<your CIDR>\n")


def test_invalid_settings_stop_the_deploy_before_aws_is_asked(monkeypatch):
    import boto3

    from tools import deploy

    monkeypatch.setattr(boto3, "Session", lambda: pytest.fail("AWS must not be asked"))
    assert deploy.main(["--cdk-json", str(ROOT / "cdk.json"), "-c", "gpu_node_count=none"]) == 2


def test_a_federated_identity_stops_the_deploy_with_the_way_out(monkeypatch, capsys):
    import types

    federated = types.SimpleNamespace(get_caller_identity=lambda: {"Arn": "arn:aws:sts::123456789012:federated-user/bob"})
    rc, seen = _recorded_deploy(monkeypatch, sts=federated)
    assert rc == 2 and "cdk" not in seen
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a federated-user, which EKS access entries do not take" in err
    assert err.endswith(" (your identity; set -c admin_principal_arn=<a role ARN> to choose another)\n")


def test_a_public_only_endpoint_stays_open_because_the_nodes_reach_it_through_the_nat():
    """EKS API reference, VpcConfigRequest: with private access off, publicAccessCidrs must hold the nodes' addresses
    (here the NAT gateways this stack creates); the deployer's /32 alone would keep every node from joining."""
    s = settings_from_files(ROOT / "cdk.json", ["endpoint_access=public"])
    args, note = endpoint_context(s, lambda: pytest.fail("the check service must not be asked"))
    assert args == []
    assert note.startswith("EKS API endpoint: public access from every address (endpoint_access=public")
