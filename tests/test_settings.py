"""Settings: parsing of cdk.json / -c values, and every refusal as one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stacks.settings import Settings, SettingsError, image_is_pinned, settings_from_context
from tests.conftest import ROOT, base_context


def test_defaults_reproduce_reference_deployment():
    s = settings_from_context(base_context())
    assert (s.region, s.gpu_instance_type, s.gpu_node_count, s.system_instance_type) == (
        "us-east-2", "g6.12xlarge", 2, "m7i.xlarge")
    assert s.kubernetes_version == "1.36" and s.use_placement_group


def test_dataclass_defaults_equal_cdk_json():
    assert settings_from_context(base_context()) == Settings()


def test_cli_strings_are_parsed_to_field_types():
    s = settings_from_context(base_context() | {
        "gpu_node_count": "4", "gpu_node_taint": "false", "availability_zones": "us-east-2a,us-east-2c",
        "training.learning_rate": "1e-4", "tags": '{"team": "ml"}'})
    assert s.gpu_node_count == 4 and s.gpu_node_taint is False
    assert s.availability_zones == ("us-east-2a", "us-east-2c")
    assert s.training.learning_rate == 1e-4 and s.tags == {"team": "ml"}


def test_cdk_owned_context_keys_are_ignored():
    settings_from_context(base_context() | {"@aws-cdk/core:newStyleStackSynthesis": True,
                                            "availability-zones:account=1:region=us-east-2": ["a"]})


BAD_SETTINGS = [
    ({"gpu_instance_type": "g4dn.xlarge"}, r"gpu_instance_type: g4dn.xlarge does not support EFA"),
    ({"gpu_instance_type": "g9.huge"}, r"gpu_instance_type: 'g9.huge' is not in the instance table"),
    ({"gpu_instance_type": "m7i.xlarge"}, r"gpu_instance_type: m7i.xlarge has no GPU"),
    ({"system_instance_type": "g6.12xlarge"}, r"system_instance_type: .* must be a CPU type"),
    ({"gpu_availability_zone": "us-west-2a"}, r"gpu_availability_zone: 'us-west-2a' must be one of availability_zones"),
    ({"availability_zones": ["us-east-2a", "eu-west-1b"]}, r"availability_zones: 'eu-west-1b' is not an AZ of region us-east-2"),
    ({"availability_zones": ["us-east-2a"]}, r"availability_zones: need two or more distinct AZs"),
    ({"gpu_node_count": 0}, r"gpu_node_count: 0 must be between 1 and 64"),
    ({"gpu_node_count": "two"}, r"gpu_node_count: expected an integer, got 'two'"),
    ({"gpu_node_count": 2.5}, r"gpu_node_count: expected an integer, got 2.5"),
    ({"kubernetes_version": "1.29"}, r"kubernetes_version: EKS can no longer create 1.29 \(extended support ended 2026-03-23\)"),
    ({"kubernetes_version": "1.35"}, r"kubernetes_version: 1.35 has no matching kubectl layer installed"),
    ({"kubernetes_version": "2.0"}, r"kubernetes_version: '2.0' is not a version EKS creates"),
    ({"vpc_cidr": "10.0.0.0/33"}, r"vpc_cidr: '10.0.0.0/33' is not an IPv4 CIDR"),
    ({"vpc_cidr": "10.0.0.0/24"}, r"vpc_cidr: '10.0.0.0/24' must have a prefix between /16 and /20"),
    ({"vpc_cidr": "10.0.0.1/16"}, r"vpc_cidr: '10.0.0.1/16' is not an IPv4 CIDR"),
    ({"capacity_reservation_id": "cr-123"}, r"capacity_reservation_id: 'cr-123' must look like cr-0123456789abcdef0"),
    ({"placement_group": "maybe"}, r"placement_group: 'maybe' must be one of auto, on, off"),
    ({"endpoint_access": "open"}, r"endpoint_access: 'open' must be one of public, private, public_and_private"),
    ({"endpoint_public_cidrs": []}, r"endpoint_public_cidrs: a public endpoint needs at least one CIDR"),
    ({"endpoint_public_cidrs": ["1.2.3.4/40"]}, r"endpoint_public_cidrs: '1.2.3.4/40' is not an IPv4 CIDR"),
    ({"admin_principal_arn": "admin"}, r"admin_principal_arn: 'admin' must be an IAM role or user ARN"),
    ({"account": "12345"}, r"account: '12345' must be 12 digits or null"),
    ({"region": "mars-1"}, r"region: 'mars-1' is not a region name"),
    ({"nat_gateways": 3}, r"nat_gateways: 3 must be between 1 and the number of AZs \(2\)"),
    ({"gpu_node_disk_gib": 20}, r"gpu_node_disk_gib: 20 must be between 100 and 16384"),
    ({"gpu_node_taint": "sometimes"}, r"gpu_node_taint: expected true or false"),
    ({"tags": {"aws:owner": "x"}}, r"tags: 'aws:owner' must be 1-128 characters, not start with 'aws:'"),
    ({"gpu_nodes": 2}, r"gpu_nodes: unknown setting; known settings: "),
]


@pytest.mark.parametrize("overrides,message", BAD_SETTINGS, ids=[next(iter(o)) + "-" + str(i) for i, (o, _) in enumerate(BAD_SETTINGS)])
def test_bad_setting_is_refused_with_one_line(overrides, message):
    with pytest.raises(SettingsError, match=message) as error:
        settings_from_context(base_context() | overrides)
    assert "\n" not in str(error.value)


def test_bad_setting_from_cdk_cli_prints_one_line_and_no_traceback(tmp_path):
    # What `cdk synth -c gpu_node_count=0` runs: the app with the context in CDK_CONTEXT_JSON.
    env = os.environ | {"CDK_CONTEXT_JSON": json.dumps({"gpu_node_count": "0"}), "CDK_OUTDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "error: gpu_node_count: 0 must be between 1 and 64" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("image,pinned", [
    ("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1", False),
    ("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.3", True),
    ("rayproject/ray:2.58.0-py311-gpu", True),
    ("registry.example.com:5000/team/ray@sha256:" + "a" * 64, True),
    ("rayproject/ray:latest", False),
])
def test_image_is_pinned(image, pinned):
    assert image_is_pinned(image) is pinned
