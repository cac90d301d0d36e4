"""Preflight verdicts against moto's EC2 (real instance-type and offering data) and seeded quotas.

moto ships only VPC service quotas, so the EC2 vCPU quotas are seeded into its backend; it has no
capacity reservations or EKS DescribeClusterVersions, so those answers come from botocore's
Stubber. Nothing here reaches AWS.
"""

from __future__ import annotations

import datetime

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.servicequotas.models import ServiceQuotasBackend

from stacks.settings import settings_from_files
from tools import preflight
from tools.preflight import FAIL, PASS, WARN

from tests.conftest import ROOT

G_QUOTA, STANDARD_QUOTA = "L-DB2E81BA", "L-1216C47A"


def settings(*overrides: str):
    return settings_from_files(ROOT / "cdk.json", overrides)


@pytest.fixture
def aws(monkeypatch):
    """moto in place of AWS, with EC2 vCPU quotas the test sets through the returned dict."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-2"}.items():
        monkeypatch.setenv(name, value)
    quotas = {G_QUOTA: 96.0, STANDARD_QUOTA: 64.0}
    original = ServiceQuotasBackend.get_service_quota

    def get_service_quota(self, service_code, quota_code):
        if service_code == "ec2" and quota_code in quotas:
            return {"ServiceCode": "ec2", "QuotaCode": quota_code, "QuotaName": quota_code, "Value": quotas[quota_code]}
        return original(self, service_code, quota_code)

    monkeypatch.setattr(ServiceQuotasBackend, "get_service_quota", get_service_quota)
    with mock_aws():
        yield quotas


def ec2():
    return boto3.client("ec2", region_name="us-east-2")


def run_instances(instance_type: str, count: int) -> None:
    image = ec2().describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2().run_instances(ImageId=image, InstanceType=instance_type, MinCount=count, MaxCount=count)


def test_gpu_type_offered_in_the_configured_az_passes(aws):
    check = preflight.check_offered(ec2(), "g6.12xlarge", "us-east-2a")
    assert check.verdict == PASS


def test_gpu_type_not_offered_in_the_az_fails_and_lists_the_azs_that_offer_it(aws):
    west = boto3.client("ec2", region_name="us-west-2")
    check = preflight.check_offered(west, "g5.48xlarge", "us-west-2d")
    assert check.verdict == FAIL
    assert "us-west-2a, us-west-2b, us-west-2c" in check.reason
    assert check.fix.startswith("-c gpu_availability_zone=us-west-2a")


def test_efa_interfaces_agree_with_the_instance_table(aws):
    check = preflight.check_efa(ec2(), "p5.48xlarge")
    assert check.verdict == PASS and "32 interface(s)" in check.reason


def test_type_without_efa_fails(aws):
    assert preflight.check_efa(ec2(), "g4dn.xlarge").verdict == FAIL


def test_enough_vcpu_quota_passes(aws):
    check = preflight.check_vcpu_quota(boto3.client("service-quotas", region_name="us-east-2"), ec2(),
                                       "g6.12xlarge", 2, "us-east-2", "GPU nodes")
    assert check.verdict == PASS and "need 96 vCPU" in check.reason and "0 in use" in check.reason


def test_quota_short_after_running_instances_fails_with_the_increase_command(aws):
    run_instances("g5.xlarge", 3)  # 3 x 4 vCPU of the same G and VT quota already running
    check = preflight.check_vcpu_quota(boto3.client("service-quotas", region_name="us-east-2"), ec2(),
                                       "g6.12xlarge", 2, "us-east-2", "GPU nodes")
    assert check.verdict == FAIL and "12 in use" in check.reason and "84 free" in check.reason
    assert check.fix == ("aws service-quotas request-service-quota-increase --service-code ec2 "
                         "--quota-code L-DB2E81BA --desired-value 108 --region us-east-2")


def test_instances_of_other_quota_classes_do_not_count(aws):
    run_instances("m5.large", 2)
    check = preflight.check_vcpu_quota(boto3.client("service-quotas", region_name="us-east-2"), ec2(),
                                       "g6.12xlarge", 2, "us-east-2", "GPU nodes")
    assert check.verdict == PASS and "0 in use" in check.reason


def test_region_enabled_passes(aws):
    assert preflight.check_region(ec2(), "us-east-2").verdict == PASS


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
    assert check.verdict == PASS and "2 x g6.12xlarge available in us-east-2a" in check.reason


def test_reservation_of_another_type_and_az_fails_with_each_mismatch():
    s = settings("capacity_reservation_id=cr-0123456789abcdef0")
    response = reservation(InstanceType="p5.48xlarge", AvailabilityZone="us-east-2b", AvailableInstanceCount=1)
    [check] = preflight.check_capacity_reservation(stubbed_reservation(response), s)
    assert check.verdict == FAIL
    assert "holds p5.48xlarge, not g6.12xlarge" in check.reason
    assert "is in us-east-2b, not us-east-2a" in check.reason and "1 instance(s) available, 2 needed" in check.reason


def test_expired_reservation_fails():
    s = settings("capacity_reservation_id=cr-0123456789abcdef0")
    [check] = preflight.check_capacity_reservation(stubbed_reservation(reservation(State="expired")), s)
    assert check.verdict == FAIL and "expired, not active" in check.reason


def test_reservation_that_does_not_exist_fails():
    s = settings("capacity_reservation_id=cr-0123456789abcdef0")
    [check] = preflight.check_capacity_reservation(stubbed_reservation({"CapacityReservations": []}), s)
    assert check.verdict == FAIL and check.reason == "cr-0123456789abcdef0 does not exist in us-east-2"


def test_reservation_that_cannot_be_read_fails_with_the_error_code():
    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_client_error("describe_capacity_reservations", service_error_code="InvalidCapacityReservationId.NotFound")
    stub.activate()
    [check] = preflight.check_capacity_reservation(client, settings("capacity_reservation_id=cr-0123456789abcdef0"))
    assert check.verdict == FAIL and check.reason == "cr-0123456789abcdef0 cannot be read: InvalidCapacityReservationId.NotFound"


def test_no_reservation_is_on_demand():
    [check] = preflight.check_capacity_reservation(None, settings())
    assert check.verdict == PASS and check.reason == "none configured (On-Demand capacity)"


def stubbed_ec2(operation: str, response: dict, params: dict | None = None):
    client = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response(operation, response, params)
    stub.activate()
    return client


def test_region_this_account_has_not_opted_into_fails_with_the_command():
    client = stubbed_ec2("describe_regions", {"Regions": [{"RegionName": "ap-east-2", "OptInStatus": "not-opted-in"}]})
    check = preflight.check_region(client, "ap-east-2")
    assert check.verdict == FAIL and "has not enabled" in check.reason
    assert check.fix == "aws account enable-region --region-name ap-east-2"


def test_region_the_account_does_not_know_fails():
    client = stubbed_ec2("describe_regions", {"Regions": [{"RegionName": "us-east-1", "OptInStatus": "opt-in-not-required"}]})
    check = preflight.check_region(client, "us-east-2")
    assert check.verdict == FAIL and check.reason == "us-east-2 is not an AWS region this account knows"


def test_type_offered_in_no_az_of_the_region_fails():
    client = stubbed_ec2("describe_instance_type_offerings", {"InstanceTypeOfferings": []})
    check = preflight.check_offered(client, "p5.48xlarge", "us-east-2a")
    assert check.verdict == FAIL and check.reason == "p5.48xlarge is not offered in any AZ of this region"


def test_efa_interface_count_that_disagrees_with_the_table_warns():
    response = {"InstanceTypes": [{"InstanceType": "p5.48xlarge",
                                   "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 16}}}]}
    check = preflight.check_efa(stubbed_ec2("describe_instance_types", response), "p5.48xlarge")
    assert check.verdict == WARN and "takes 16 EFA interfaces, the project's table says 32" in check.reason


def test_quota_of_a_family_this_check_does_not_know_warns():
    check = preflight.check_vcpu_quota(None, None, "trn1.32xlarge", 2, "us-east-2", "GPU nodes")
    assert check.verdict == WARN and "counts against a quota this check does not know" in check.reason


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
    assert preflight.check_kubernetes_version(stubbed_eks(response), "1.36").verdict == PASS


def test_kubernetes_version_eks_does_not_list_fails():
    check = preflight.check_kubernetes_version(stubbed_eks({"clusterVersions": []}), "1.36")
    assert check.verdict == FAIL and "does not offer Kubernetes 1.36" in check.reason


@pytest.mark.parametrize("status", ["UNSUPPORTED", "END_OF_SUPPORT"])
def test_kubernetes_version_eks_no_longer_supports_fails(status):
    check = preflight.check_kubernetes_version(stubbed_eks({"clusterVersions": [{"clusterVersion": "1.36", "versionStatus": status}]}), "1.36")
    assert check.verdict == FAIL and check.reason == f"Kubernetes 1.36 is {status} on EKS"


def test_unknown_version_fails_on_the_table_when_eks_cannot_be_asked():
    check = preflight.check_kubernetes_version(stubbed_eks(None, error="AccessDeniedException"), "1.28")
    assert check.verdict == FAIL and "1.28 is not in the project's creatable list" in check.reason


def test_kubernetes_version_falls_back_to_the_table_when_eks_cannot_be_asked():
    check = preflight.check_kubernetes_version(stubbed_eks(None, error="AccessDeniedException"), "1.36")
    assert check.verdict == PASS and "EKS not asked" in check.reason


def test_whole_preflight_on_moto_exits_zero_and_prints_the_table(aws, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert preflight.main([]) == 0
    out = capsys.readouterr().out
    assert "PASS  offered in AZ" in out and "\n0 FAIL" in out


def test_whole_preflight_exits_one_on_a_short_quota(aws, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    aws[G_QUOTA] = 48.0
    assert preflight.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL  vCPU quota (GPU nodes)" in out and "--desired-value 96" in out


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
