"""Preflight verdicts against moto's EC2 (real instance-type and offering data) and seeded quotas.

moto ships only VPC service quotas, so the EC2 vCPU quotas are seeded into its backend; it has no
capacity reservations or EKS DescribeClusterVersions, so those answers come from botocore's
Stubber. Nothing here reaches AWS.
"""

from __future__ import annotations

import datetime
import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.ecr.responses import ECRResponse
from moto.servicequotas.models import ServiceQuotasBackend

from stacks.context import settings_from_files
from tools import preflight
from tools.preflight import FAIL, PASS, WARN, Check

from tests.conftest import ROOT, fake_aws_credentials

G_QUOTA, STANDARD_QUOTA = "L-DB2E81BA", "L-1216C47A"


def settings(*overrides: str):
    return settings_from_files(ROOT / "cdk.json", overrides)


@pytest.fixture
def aws(monkeypatch):
    """moto in place of AWS, with EC2 vCPU quotas the test sets through the returned dict."""
    fake_aws_credentials(monkeypatch, region="us-east-2", AWS_SESSION_TOKEN="testing")
    quotas = {G_QUOTA: 96.0, STANDARD_QUOTA: 64.0}
    original = ServiceQuotasBackend.get_service_quota

    def get_service_quota(self, service_code, quota_code):
        if service_code == "ec2" and quota_code in quotas:
            return {"ServiceCode": "ec2", "QuotaCode": quota_code, "QuotaName": quota_code, "Value": quotas[quota_code]}
        return original(self, service_code, quota_code)

    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", get_service_quota)
    # moto has no pull-through cache rules: the account holds none, as ECR answers then.
    monkeypatch.setattr(ECRResponse, "describe_pull_through_cache_rules",
                        lambda self: json.dumps({"pullThroughCacheRules": []}), raising=False)
    with mock_aws():
        yield quotas


def ec2():
    return boto3.client("ec2", region_name="us-east-2")


def run_instances(instance_type: str, count: int) -> None:
    image = ec2().describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2().run_instances(ImageId=image, InstanceType=instance_type, MinCount=count, MaxCount=count)


def test_gpu_type_offered_in_the_configured_az_passes(aws):
    check = preflight.check_offered(ec2(), "g6.12xlarge", "us-east-2a")
    assert check == Check("offered in AZ", PASS, "g6.12xlarge is offered in us-east-2a")


def test_gpu_type_not_offered_in_the_az_fails_and_lists_the_azs_that_offer_it(aws):
    west = boto3.client("ec2", region_name="us-west-2")
    check = preflight.check_offered(west, "g5.48xlarge", "us-west-2d")
    assert check == Check("offered in AZ", FAIL, "g5.48xlarge is not offered in us-west-2d; it is in us-west-2a, us-west-2b, us-west-2c",
                          "-c gpu_availability_zone=us-west-2a (and list it in availability_zones)")


def test_efa_interfaces_agree_with_the_instance_table(aws):
    check = preflight.check_efa(ec2(), "p5.48xlarge")
    assert check == Check("EFA support", PASS, "p5.48xlarge supports EFA with 32 interface(s), as the table says")


def test_type_without_efa_fails(aws):
    assert preflight.check_efa(ec2(), "g4dn.xlarge") == Check(
        "EFA support", FAIL, "g4dn.xlarge does not support EFA", "-c gpu_instance_type=<an EFA type: g6.12xlarge, p5.48xlarge, ...>")


def test_enough_vcpu_quota_passes(aws):
    check = preflight.check_vcpu_quota(boto3.client("service-quotas", region_name="us-east-2"), ec2(),
                                       "g6.12xlarge", 2, "us-east-2", "GPU nodes")
    assert check == Check("vCPU quota (GPU nodes)", PASS, "2 x g6.12xlarge need 96 vCPU; quota 'Running On-Demand G and VT "
                          "instances' (L-DB2E81BA) is 96, 0 in use")


def test_quota_short_after_running_instances_fails_with_the_increase_command(aws):
    run_instances("g5.xlarge", 3)  # 3 x 4 vCPU of the same G and VT quota already running
    check = preflight.check_vcpu_quota(boto3.client("service-quotas", region_name="us-east-2"), ec2(),
                                       "g6.12xlarge", 2, "us-east-2", "GPU nodes")
    assert check.verdict == FAIL and check.name == "vCPU quota (GPU nodes)"
    assert check.reason == ("2 x g6.12xlarge need 96 vCPU; quota 'Running On-Demand G and VT instances' (L-DB2E81BA) is 96, "
                            "12 in use, 84 free")
    assert check.fix == ("aws service-quotas request-service-quota-increase --service-code ec2 "
                         "--quota-code L-DB2E81BA --desired-value 108 --region us-east-2")


def test_instances_of_other_quota_classes_do_not_count(aws):
    run_instances("m5.large", 2)
    check = preflight.check_vcpu_quota(boto3.client("service-quotas", region_name="us-east-2"), ec2(),
                                       "g6.12xlarge", 2, "us-east-2", "GPU nodes")
    assert check.verdict == PASS and "0 in use" in check.reason


def test_region_enabled_passes(aws):
    assert preflight.check_region(ec2(), "us-east-2") == Check("region", PASS, "us-east-2 is enabled (opt-in-not-required)")


def reservation(**fields) -> dict:
    base = {"CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "g6.12xlarge",
            "AvailabilityZone": "us-east-2a", "State": "active", "AvailableInstanceCount": 2, "TotalInstanceCount": 2}
    return {"CapacityReservations": [base | fields]}


def stubbed_reservation(response: dict):
    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("describe_capacity_reservations", response,
                      {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
    stub.activate()
    return client


def test_matching_active_reservation_passes():
    s = settings("capacity_reservation_id=cr-0123456789abcdef0")
    [check] = preflight.check_capacity_reservation(stubbed_reservation(reservation()), s)
    assert check == Check("capacity reservation", PASS, "cr-0123456789abcdef0 is active: 2 x g6.12xlarge available in us-east-2a")


def test_reservation_of_another_type_and_az_fails_with_each_mismatch():
    s = settings("capacity_reservation_id=cr-0123456789abcdef0")
    response = reservation(InstanceType="p5.48xlarge", AvailabilityZone="us-east-2b", AvailableInstanceCount=1)
    [check] = preflight.check_capacity_reservation(stubbed_reservation(response), s)
    assert check == Check("capacity reservation", FAIL, "cr-0123456789abcdef0: it holds p5.48xlarge, not g6.12xlarge; it is in "
                          "us-east-2b, not us-east-2a; 1 instance(s) available, 2 needed",
                          "-c gpu_instance_type=p5.48xlarge -c gpu_availability_zone=us-east-2b")


def test_expired_reservation_fails():
    s = settings("capacity_reservation_id=cr-0123456789abcdef0")
    [check] = preflight.check_capacity_reservation(stubbed_reservation(reservation(State="expired")), s)
    assert check == Check("capacity reservation", FAIL, "cr-0123456789abcdef0: its state is expired, not active",
                          "use an active reservation")


def test_reservation_that_does_not_exist_fails():
    s = settings("capacity_reservation_id=cr-0123456789abcdef0")
    [check] = preflight.check_capacity_reservation(stubbed_reservation({"CapacityReservations": []}), s)
    assert check == Check("capacity reservation", FAIL, "cr-0123456789abcdef0 does not exist in us-east-2",
                          "check the id and region, or set -c capacity_reservation_id=null")


def test_reservation_that_cannot_be_read_fails_with_the_error_code():
    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_client_error("describe_capacity_reservations", service_error_code="InvalidCapacityReservationId.NotFound")
    stub.activate()
    [check] = preflight.check_capacity_reservation(client, settings("capacity_reservation_id=cr-0123456789abcdef0"))
    assert check.verdict == FAIL and check.reason == "cr-0123456789abcdef0 cannot be read: InvalidCapacityReservationId.NotFound"


def test_no_reservation_is_on_demand():
    [check] = preflight.check_capacity_reservation(None, settings())
    assert check == Check("capacity reservation", PASS, "none configured (On-Demand capacity)")


def stubbed_ec2(operation: str, response: dict, params: dict | None = None):
    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response(operation, response, params)
    stub.activate()
    return client


def test_region_this_account_has_not_opted_into_fails_with_the_command():
    client = stubbed_ec2("describe_regions", {"Regions": [{"RegionName": "ap-east-2", "OptInStatus": "not-opted-in"}]})
    check = preflight.check_region(client, "ap-east-2")
    assert check == Check("region", FAIL, "ap-east-2 is an opt-in region that this account has not enabled",
                          "aws account enable-region --region-name ap-east-2")


def test_region_the_account_does_not_know_fails():
    client = stubbed_ec2("describe_regions", {"Regions": [{"RegionName": "us-east-1", "OptInStatus": "opt-in-not-required"}]})
    check = preflight.check_region(client, "us-east-2")
    assert check == Check("region", FAIL, "us-east-2 is not an AWS region this account knows",
                          "set -c region=<one of: us-east-1, ...>")


def test_type_offered_in_no_az_of_the_region_fails():
    client = stubbed_ec2("describe_instance_type_offerings", {"InstanceTypeOfferings": []})
    check = preflight.check_offered(client, "p5.48xlarge", "us-east-2a")
    assert check == Check("offered in AZ", FAIL, "p5.48xlarge is not offered in any AZ of this region",
                          "choose another region (-c region=...) or -c gpu_instance_type=...")


def test_efa_interface_count_that_disagrees_with_the_table_warns():
    response = {"InstanceTypes": [{"InstanceType": "p5.48xlarge",
                                   "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 16}}}]}
    check = preflight.check_efa(stubbed_ec2("describe_instance_types", response), "p5.48xlarge")
    assert check == Check("EFA support", WARN, "EC2 says p5.48xlarge takes 16 EFA interfaces, the project's table says 32",
                          "correct cdk_constructs/instance_types.py (the launch template uses the table)")


def test_quota_of_a_family_this_check_does_not_know_warns():
    check = preflight.check_vcpu_quota(None, None, "trn1.32xlarge", 2, "us-east-2", "GPU nodes")
    assert check == Check("vCPU quota (GPU nodes)", WARN, "trn1.32xlarge counts against a quota this check does not know",
                          "check it in the Service Quotas console")


def stubbed_eks(response: dict | None, error: str | None = None):
    client = boto3.client("eks", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    if error:
        stub.add_client_error("describe_cluster_versions", service_error_code=error)
    else:
        stub.add_response("describe_cluster_versions", response, {"clusterVersions": ["1.36"]})
    stub.activate()
    return client


def test_kubernetes_version_offered_by_eks_passes():
    response = {"clusterVersions": [{"clusterVersion": "1.36", "versionStatus": "STANDARD_SUPPORT",
                                     "releaseDate": datetime.datetime(2026, 9, 1)}]}
    assert preflight.check_kubernetes_version(stubbed_eks(response), "1.36") == Check(
        "kubernetes version", PASS, "EKS creates Kubernetes 1.36 (STANDARD_SUPPORT)")


def test_kubernetes_version_eks_does_not_list_fails():
    check = preflight.check_kubernetes_version(stubbed_eks({"clusterVersions": []}), "1.36")
    assert check == Check("kubernetes version", FAIL, "EKS does not offer Kubernetes 1.36 in this region",
                          "set -c kubernetes_version=<1.31, 1.32, 1.33, 1.34, 1.35, 1.36>")


@pytest.mark.parametrize("status", ["UNSUPPORTED", "END_OF_SUPPORT"])
def test_kubernetes_version_eks_no_longer_supports_fails(status):
    check = preflight.check_kubernetes_version(stubbed_eks({"clusterVersions": [{"clusterVersion": "1.36", "versionStatus": status}]}), "1.36")
    assert check == Check("kubernetes version", FAIL, f"Kubernetes 1.36 is {status} on EKS", "set -c kubernetes_version=1.35")


def test_unknown_version_fails_on_the_table_when_eks_cannot_be_asked():
    check = preflight.check_kubernetes_version(stubbed_eks(None, error="AccessDeniedException"), "1.28")
    assert check == Check("kubernetes version", FAIL, "1.28 is not in the project's creatable list (EKS not asked: "
                          "AccessDeniedException)", "set -c kubernetes_version=<1.31, 1.32, 1.33, 1.34, 1.35, 1.36>")


def test_kubernetes_version_falls_back_to_the_table_when_eks_cannot_be_asked():
    check = preflight.check_kubernetes_version(stubbed_eks(None, error="AccessDeniedException"), "1.36")
    assert check == Check("kubernetes version", PASS, "1.36 is in the project's creatable list (EKS not asked: AccessDeniedException)")


@pytest.fixture
def app(tmp_path):
    """The app's cdk.json and cdk.context.json in a folder of their own: preflight caches its lookups beside cdk.json."""
    for name in ("cdk.json", "cdk.context.json"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    return tmp_path


def test_whole_preflight_on_moto_exits_zero_and_prints_the_table(aws, capsys, app):
    assert preflight.main(["--cdk-json", str(app / "cdk.json")]) == 0
    assert capsys.readouterr().out == WHOLE_RUN


WHOLE_RUN = """preflight for stack EksFsdpEfa in us-east-2, account 123456789012
PASS  region                     us-east-2 is enabled (opt-in-not-required)
PASS  kubernetes version         1.36 is in the project's creatable list (EKS not asked: ClientError)
PASS  capacity type              g6.12xlarge can be bought as on-demand in us-east-2
PASS  zones                      g6.12xlarge on-demand: offered in us-east-2a, us-east-2b, us-east-2c (capacity not probed: PROBE=1 probes it)
PASS  offered in AZ              g6.12xlarge is offered in us-east-2a
PASS  EFA support                g6.12xlarge supports EFA with 1 interface(s), as the table says
PASS  vCPU quota (GPU nodes)     2 x g6.12xlarge need 96 vCPU; quota 'Running On-Demand G and VT instances' (L-DB2E81BA) is 96, 0 in use
PASS  vCPU quota (system nodes)  1 x m7i.xlarge need 4 vCPU; quota 'Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances' (L-1216C47A) is 64, 0 in use
PASS  capacity reservation       none configured (On-Demand capacity)
PASS  leftover log groups        none of the stack's 5 log groups exists yet
PASS  pull-through cache rule    no rule of prefix ecr-public yet
cached in cdk.context.json for synth: gpu-zones:us-east-2:g6.12xlarge:on-demand, instance-type-offerings:us-east-2:g6.12xlarge
0 FAIL, 0 WARN, 11 PASS
"""


def test_the_whole_run_caches_what_synth_reads_beside_the_apps_cdk_json(aws, app):
    """moto's EC2 data (from AWS's own listings): g6.12xlarge sold on-demand and spot in three us-east-2 zones."""
    preflight.main(["--cdk-json", str(app / "cdk.json")])
    cached = json.loads((app / "cdk.context.json").read_text())
    assert cached["instance-type-offerings:us-east-2:g6.12xlarge"]["usage_classes"] == ["on-demand", "spot"]
    assert cached["gpu-zones:us-east-2:g6.12xlarge:on-demand"]["zones"] == ["us-east-2a", "us-east-2b", "us-east-2c"]
    assert "model-config:Qwen/Qwen2.5-1.5B@main" in cached  # the planner's cache is kept


class RefusingSession:
    """A session whose every AWS call is refused, as for a caller without read permissions."""

    def __init__(self):
        self.regions = []

    def client(self, service, region_name=None):
        from botocore.exceptions import ClientError

        self.regions.append((service, region_name))

        class Refusing:
            class exceptions:  # what service-quotas' client names its "no such quota" error
                NoSuchResourceException = type("NoSuchResourceException", (Exception,), {})

            def __getattr__(self, operation):
                def refuse(**_):
                    raise ClientError({"Error": {"Code": "AccessDenied"}}, operation)
                return refuse

            def get_paginator(self, operation):
                raise ClientError({"Error": {"Code": "AccessDenied"}}, operation)
        return Refusing()


REFUSED = ("grant the caller read access to EC2, EKS, Service Quotas, CloudFormation, CloudWatch Logs and ECR "
           "(e.g. ReadOnlyAccess)")


def test_a_caller_that_cannot_read_the_region_stops_at_the_first_check():
    session = RefusingSession()
    assert preflight.run_checks(session, settings()) == [
        Check("region", FAIL, "could not check: describe_regions failed with AccessDenied", REFUSED)]
    assert session.regions == [("ec2", "us-east-2"), ("eks", "us-east-2"), ("service-quotas", "us-east-2")]


def test_every_refused_call_is_a_fail_under_its_checks_name(monkeypatch):
    monkeypatch.setattr(preflight, "check_region", lambda ec2, region: Check("region", PASS, "enabled"))
    kubernetes = Check("kubernetes version", PASS, "1.36 is in the project's creatable list (EKS not asked: ClientError)")
    assert preflight.run_checks(RefusingSession(), settings("capacity_reservation_id=cr-0123456789abcdef0")) == [
        Check("region", PASS, "enabled"), kubernetes,
        Check("capacity type", FAIL, "could not check: describe_instance_types failed with AccessDenied", REFUSED),
        Check("zones", FAIL, "could not check: describe_availability_zones failed with AccessDenied", REFUSED),
        Check("offered in AZ", FAIL, "could not check: describe_instance_type_offerings failed with AccessDenied", REFUSED),
        Check("EFA support", FAIL, "could not check: describe_instance_types failed with AccessDenied", REFUSED),
        Check("vCPU quota (GPU nodes)", FAIL, "could not check: get_service_quota failed with AccessDenied", REFUSED),
        Check("vCPU quota (system nodes)", FAIL, "could not check: get_service_quota failed with AccessDenied", REFUSED),
        # The reservation check reads its own errors: an id that cannot be read is named with the code.
        Check("capacity reservation", FAIL, "cr-0123456789abcdef0 cannot be read: AccessDenied",
              "check the id and region, or set -c capacity_reservation_id=null"),
        Check("leftover log groups", FAIL, "could not check: describe_stacks failed with AccessDenied", REFUSED),
        Check("pull-through cache rule", FAIL, "could not check: describe_pull_through_cache_rules failed with AccessDenied",
              REFUSED),
    ]


def test_whole_preflight_exits_one_on_a_short_quota(aws, capsys, app):
    aws[G_QUOTA], aws[STANDARD_QUOTA] = 48.0, 2.0
    assert preflight.main(["--cdk-json", str(app / "cdk.json")]) == 1
    out = capsys.readouterr().out
    assert "FAIL  vCPU quota (GPU nodes)" in out and "--quota-code L-DB2E81BA --desired-value 96 --region us-east-2" in out
    assert "FAIL  vCPU quota (system nodes)" in out and "--quota-code L-1216C47A --desired-value 4 --region us-east-2" in out


def test_no_credentials_is_one_line_and_exit_two(monkeypatch, tmp_path, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(ROOT)
    assert preflight.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no AWS credentials found") and "\n" not in err


def test_bad_override_is_refused_before_any_aws_call(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert preflight.main(["-c", "gpu_node_count=0"]) == 2
    assert capsys.readouterr().err.startswith("error: gpu_node_count:")


def test_a_refused_aws_call_is_a_fail_naming_the_call():
    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_client_error("describe_instance_type_offerings", service_error_code="UnauthorizedOperation")
    stub.activate()
    [check] = preflight._guarded("offered in AZ", lambda: preflight.check_offered(client, "g6.12xlarge", "us-east-2a"))
    assert check.verdict == FAIL
    assert check.reason == "could not check: DescribeInstanceTypeOfferings failed with UnauthorizedOperation"


@pytest.mark.parametrize("instance_type,quota_class", [
    ("g6.12xlarge", "g"), ("vt1.3xlarge", "g"), ("p5.48xlarge", "p"), ("m7i.xlarge", "standard"),
    ("c7i.large", "standard"), ("inf2.xlarge", None), ("trn1.32xlarge", None), ("x2idn.16xlarge", None),
])
def test_vcpu_quota_class_by_family(instance_type, quota_class):
    from cdk_constructs.instance_types import vcpu_quota_class

    assert vcpu_quota_class(instance_type) == quota_class


@pytest.mark.parametrize("content,message", [
    ("{ not json", r"error: .*cdk.json: not JSON \(Expecting property name enclosed in double quotes at line 1\)"),
    ('["a"]', r'error: .*cdk.json: expected a JSON object with a "context" object'),
    (None, r"error: .*: no such file"),
])
def test_a_cdk_json_that_cannot_be_read_is_one_line(tmp_path, capsys, content, message):
    import re

    target = tmp_path / "cdk.json"
    if content is None:
        target = tmp_path  # a folder
    else:
        target.write_text(content)
    assert preflight.main(["--cdk-json", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert re.match(message, err) and "\n" not in err


def test_table_shows_the_fix_under_a_failing_check_only():
    table = preflight.format_table([Check("region", PASS, "us-east-2 is enabled", "never shown"),
                                    Check("offered in AZ", FAIL, "not offered", "choose another AZ")])
    assert table.splitlines() == ["PASS  region         us-east-2 is enabled",
                                  "FAIL  offered in AZ  not offered",
                                  "                     fix: choose another AZ"]


def test_region_listing_includes_regions_not_opted_into_and_defaults_to_enabled():
    # Only AllRegions=True lists the regions an account has not opted into; older partitions omit OptInStatus.
    client = stubbed_ec2("describe_regions", {"Regions": [{"RegionName": "us-east-2"}]}, {"AllRegions": True})
    assert preflight.check_region(client, "us-east-2") == Check("region", PASS, "us-east-2 is enabled (opt-in-not-required)")


def test_unknown_region_lists_six_known_regions():
    regions = [{"RegionName": name, "OptInStatus": "opt-in-not-required"}
               for name in ("us-west-2", "us-west-1", "us-east-1", "eu-west-1", "eu-central-1", "ap-south-1", "sa-east-1")]
    check = preflight.check_region(stubbed_ec2("describe_regions", {"Regions": regions}), "us-east-9")
    assert check.fix == "set -c region=<one of: ap-south-1, eu-central-1, eu-west-1, sa-east-1, us-east-1, us-west-1, ...>"


@pytest.mark.parametrize("entry,verdict,reason", [
    ({"clusterVersion": "1.36", "status": "UNSUPPORTED"}, FAIL, "Kubernetes 1.36 is UNSUPPORTED on EKS"),  # the older field
    ({"clusterVersion": "1.36"}, PASS, "EKS creates Kubernetes 1.36 (available)"),
])
def test_kubernetes_version_status_falls_back_to_the_older_field_then_available(entry, verdict, reason):
    check = preflight.check_kubernetes_version(stubbed_eks({"clusterVersions": [entry]}), "1.36")
    assert (check.verdict, check.reason) == (verdict, reason)


def test_no_credentials_message_in_full(monkeypatch, capsys):
    from botocore.exceptions import NoCredentialsError

    class Anonymous:
        def client(self, service, region_name=None):
            raise NoCredentialsError()

    monkeypatch.setattr(boto3, "Session", Anonymous)
    monkeypatch.chdir(ROOT)
    assert preflight.main([]) == 2
    assert capsys.readouterr().err == ("error: no AWS credentials found (boto3 looked in the environment, ~/.aws and the "
                                       "instance role); run `aws configure` or `aws sso login` first\n")


def test_refused_credentials_are_one_line_and_sts_is_asked_in_the_stacks_region(monkeypatch, capsys):
    from botocore.exceptions import ClientError

    asked = []

    class Refused:
        def client(self, service, region_name=None):
            asked.append((service, region_name))
            return self

        def get_caller_identity(self):
            raise ClientError({"Error": {"Code": "InvalidClientTokenId", "Message": "The token is invalid.\nsecond line"}},
                              "GetCallerIdentity")

    monkeypatch.setattr(boto3, "Session", Refused)
    monkeypatch.chdir(ROOT)
    assert preflight.main([]) == 2
    assert capsys.readouterr().err == ("error: AWS credentials were refused: An error occurred (InvalidClientTokenId) when "
                                       "calling the GetCallerIdentity operation: The token is invalid.\n")
    assert asked == [("sts", "us-east-2")]


def test_the_cli_names_itself(capsys):
    with pytest.raises(SystemExit):
        preflight.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m tools.preflight ")


@pytest.mark.parametrize("network", [
    None,  # no NetworkInfo at all
    {"EfaSupported": False, "EfaInfo": {"MaximumEfaInterfaces": 1}},  # an interface count without support counts for nothing
    {"EfaSupported": True},  # support without a count
])
def test_types_without_usable_efa_fail(network):
    info = {"InstanceType": "g6.12xlarge", **({"NetworkInfo": network} if network is not None else {})}
    check = preflight.check_efa(stubbed_ec2("describe_instance_types", {"InstanceTypes": [info]}), "g6.12xlarge")
    assert check == Check("EFA support", FAIL, "g6.12xlarge does not support EFA",
                          "-c gpu_instance_type=<an EFA type: g6.12xlarge, p5.48xlarge, ...>")


def test_an_efa_type_missing_from_the_table_passes_on_what_ec2_says():
    info = {"InstanceType": "c5n.18xlarge", "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 1}}}
    check = preflight.check_efa(stubbed_ec2("describe_instance_types", {"InstanceTypes": [info]}), "c5n.18xlarge")
    assert check == Check("EFA support", PASS, "c5n.18xlarge supports EFA with 1 interface(s), a type the project's table does not list")


def test_instances_in_use_count_pending_and_running_ones():
    client = stubbed_ec2("describe_instances", {"Reservations": []},
                         {"Filters": [{"Name": "instance-state-name", "Values": ["pending", "running"]}]})
    assert preflight._vcpus_in_use(client, "G") == 0


class Unreachable:
    """An EC2 client whose endpoint cannot be reached: botocore errors without an AWS response."""

    def describe_capacity_reservations(self, **_):
        from botocore.exceptions import EndpointConnectionError

        raise EndpointConnectionError(endpoint_url="https://ec2.us-east-2.amazonaws.com")


def test_a_reservation_behind_an_unreachable_endpoint_names_the_error():
    [check] = preflight.check_capacity_reservation(Unreachable(), settings("capacity_reservation_id=cr-0123456789abcdef0"))
    assert check == Check("capacity reservation", FAIL, "cr-0123456789abcdef0 cannot be read: EndpointConnectionError",
                          "check the id and region, or set -c capacity_reservation_id=null")


def test_a_reservation_without_an_available_count_has_none_available():
    response = reservation()
    del response["CapacityReservations"][0]["AvailableInstanceCount"]
    [check] = preflight.check_capacity_reservation(stubbed_reservation(response), settings("capacity_reservation_id=cr-0123456789abcdef0"))
    assert check.reason == "cr-0123456789abcdef0: 0 instance(s) available, 2 needed"


def test_a_check_that_fails_before_reaching_aws_is_a_fail_naming_the_error():
    from botocore.exceptions import NoRegionError

    def check():
        raise NoRegionError()

    assert preflight._guarded("region", check) == [Check("region", FAIL, "could not check: an AWS call failed with NoRegionError", REFUSED)]


def test_a_quota_never_changed_is_the_aws_default():
    client = boto3.client("service-quotas", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_client_error("get_service_quota", service_error_code="NoSuchResourceException")
    stub.add_response("get_aws_default_service_quota", {"Quota": {"Value": 64.0}}, {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"})
    stub.activate()
    assert preflight._quota_value(client, "L-DB2E81BA") == 64


# ------------------------------------------------------------------ leftover log groups


def _leftover_check():
    return preflight.check_leftover_log_groups(boto3.client("logs", region_name="us-east-2"),
                                               boto3.client("cloudformation", region_name="us-east-2"), settings())


def test_a_log_group_left_by_a_destroyed_stack_fails_with_the_command_that_deletes_it(aws):
    boto3.client("logs", region_name="us-east-2").create_log_group(
        logGroupName="/aws/containerinsights/EksFsdpEfa/application")
    assert _leftover_check() == Check(
        "leftover log groups", FAIL,
        "/aws/containerinsights/EksFsdpEfa/application left by an earlier stack EksFsdpEfa: "
        "the deploy would fail creating it",
        "read what you need from it, then aws logs delete-log-group --log-group-name "
        "/aws/containerinsights/EksFsdpEfa/application --region us-east-2")


def test_a_group_of_another_stack_or_name_is_no_leftover(aws):
    logs = boto3.client("logs", region_name="us-east-2")
    logs.create_log_group(logGroupName="/aws/containerinsights/EksFsdpEfa2/application")
    logs.create_log_group(logGroupName="/aws/containerinsights/EksFsdpEfa/applications")
    assert _leftover_check().verdict == PASS


def test_the_groups_of_a_stack_that_exists_are_its_own(aws):
    boto3.client("logs", region_name="us-east-2").create_log_group(logGroupName="/aws/eks/EksFsdpEfa/cluster")
    boto3.client("cloudformation", region_name="us-east-2").create_stack(
        StackName="EksFsdpEfa", TemplateBody='{"Resources": {"T": {"Type": "AWS::SNS::Topic"}}}')
    assert _leftover_check() == Check("leftover log groups", PASS, "stack EksFsdpEfa exists: its log groups are its own")


@pytest.mark.parametrize("status", ["ROLLBACK_COMPLETE", "REVIEW_IN_PROGRESS"])
def test_a_stack_the_cli_creates_anew_owns_no_log_group(aws, status):
    # The aws-cdk CLI deletes a ROLLBACK_COMPLETE stack and re-creates it (deploy-stack: "Found existing stack
    # ... that had previously failed creation. Deleting it before attempting to re-create it."), and treats a
    # REVIEW_IN_PROGRESS stack as absent: a group of that name then fails the create.
    boto3.client("logs", region_name="us-east-2").create_log_group(logGroupName="/aws/eks/EksFsdpEfa/cluster")
    cloudformation = boto3.client("cloudformation", region_name="us-east-2")
    stub = Stubber(cloudformation)
    stub.add_response("describe_stacks", {"Stacks": [{
        "StackName": "EksFsdpEfa", "StackStatus": status,
        "CreationTime": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)}]}, {"StackName": "EksFsdpEfa"})
    stub.activate()
    check = preflight.check_leftover_log_groups(boto3.client("logs", region_name="us-east-2"), cloudformation, settings())
    assert (check.verdict, check.reason) == (
        FAIL, "/aws/eks/EksFsdpEfa/cluster left by an earlier stack EksFsdpEfa: the deploy would fail creating it")


# ------------------------------------------------------------------ the pull-through cache rule


def _cache_rule_check(rules, stack_status=None, stack_resource_types=(), *overrides):
    """The check against stubbed ECR (the rules of prefix ecr-public) and CloudFormation (the stack, if any)."""
    ecr = boto3.client("ecr", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    ecr_stub = Stubber(ecr)
    if rules:
        ecr_stub.add_response("describe_pull_through_cache_rules", {"pullThroughCacheRules": rules},
                              {"ecrRepositoryPrefixes": ["ecr-public"]})
    else:
        ecr_stub.add_client_error("describe_pull_through_cache_rules",
                                  service_error_code="PullThroughCacheRuleNotFoundException")
    ecr_stub.activate()
    cloudformation = boto3.client("cloudformation", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    cfn_stub = Stubber(cloudformation)
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    if stack_status is None:
        cfn_stub.add_client_error("describe_stack_resources", service_error_code="ValidationError",
                                  service_message="Stack with id EksFsdpEfa does not exist")
    else:
        cfn_stub.add_response("describe_stack_resources", {"StackResources": [
            {"LogicalResourceId": f"R{i}", "ResourceType": kind, "Timestamp": when, "ResourceStatus": "CREATE_COMPLETE"}
            for i, kind in enumerate(stack_resource_types)]}, {"StackName": "EksFsdpEfa"})
        cfn_stub.add_response("describe_stacks", {"Stacks": [
            {"StackName": "EksFsdpEfa", "StackStatus": stack_status, "CreationTime": when}]}, {"StackName": "EksFsdpEfa"})
    cfn_stub.activate()
    return preflight.check_pull_through_cache_rule(ecr, cloudformation, settings(*overrides))


# The ECR console proposes ecr-public as the prefix for ECR Public: an account may hold such a rule already.
_OTHER_RULE = [{"ecrRepositoryPrefix": "ecr-public", "upstreamRegistryUrl": "public.ecr.aws", "registryId": "123456789012"}]


def test_no_rule_of_the_prefix_passes():
    assert _cache_rule_check([]).verdict == PASS


def test_a_rule_of_the_prefix_outside_the_stack_fails_with_both_ways_out():
    # CreatePullThroughCacheRule refuses a prefix already taken (PullThroughCacheRuleAlreadyExistsException).
    check = _cache_rule_check(_OTHER_RULE)
    assert (check.verdict, check.reason) == (
        FAIL, "a rule of prefix ecr-public (upstream public.ecr.aws) already exists in us-east-2: "
              "the deploy would fail creating the stack's own")
    assert check.fix == ("set -c image_pull_through_cache=false (pulls through the NAT), or delete it: "
                         "aws ecr delete-pull-through-cache-rule --ecr-repository-prefix ecr-public --region us-east-2")


def test_the_rule_of_the_deployed_stack_is_its_own():
    assert _cache_rule_check(_OTHER_RULE, "UPDATE_COMPLETE", ["AWS::ECR::PullThroughCacheRule"]).verdict == PASS


def test_a_deployed_stack_without_the_cache_does_not_own_the_rule():
    # Turning image_pull_through_cache on for a stack deployed without it creates the rule in an update.
    assert _cache_rule_check(_OTHER_RULE, "UPDATE_COMPLETE", ["AWS::S3::Bucket"]).verdict == FAIL


def test_a_stack_the_cli_re_creates_does_not_own_the_rule():
    assert _cache_rule_check(_OTHER_RULE, "ROLLBACK_COMPLETE", ["AWS::ECR::PullThroughCacheRule"]).verdict == FAIL


def test_with_the_cache_off_a_rule_is_no_conflict():
    ecr = boto3.client("ecr", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    check = preflight.check_pull_through_cache_rule(ecr, None, settings("image_pull_through_cache=false"))
    assert check == Check("pull-through cache rule", PASS, "image_pull_through_cache is off: the stack creates no rule")
