"""stacks/validation.py case by case: the side of each range that test_settings leaves open, the second retired
Kubernetes version, and the tracker secrets and servers that are accepted when the stack's account is not set."""

from __future__ import annotations

import pytest

from stacks.context import settings_from_context
from stacks.settings import SettingsError
from tests.conftest import base_context


def settings(**overrides):
    return settings_from_context(base_context() | overrides)


@pytest.mark.parametrize("overrides,message", [
    ({"gpu_capacity_type": "spot", "gpu_spot_interruptions": -1}, r"^gpu_spot_interruptions: -1 must be between 0 and 20$"),
    ({"gpu_scale_down_delay_minutes": 1441}, r"^gpu_scale_down_delay_minutes: 1441 must be between 1 and 1440$"),
    ({"training.rerun": -1}, r"^training.rerun: -1 must be between 0 and 999$"),
    ({"training.ttl_seconds_after_finished": -1}, r"^training.ttl_seconds_after_finished: -1 must be between 0 and 86400"),
    ({"training.submitter_backoff_limit": 11}, r"^training.submitter_backoff_limit: 11 must be between 0 and 10$"),
    # EKS Kubernetes release calendar: 1.30's extended support ended 2026-07-23.
    # EKS API reference, VpcConfigRequest: private access off, the CIDRs must hold the nodes' (NAT) addresses.
    ({"endpoint_access": "public", "endpoint_public_cidrs": ["203.0.113.7/32"]},
     r"^endpoint_public_cidrs: with endpoint_access=public the nodes reach the API from the NAT gateways' addresses"),
    ({"kubernetes_version": "1.30"}, r"^kubernetes_version: EKS can no longer create 1.30 \(extended support ended "
                                     r"2026-07-23\); allowed: "),
])
def test_the_other_end_of_a_range_is_refused_with_its_line(overrides, message):
    with pytest.raises(SettingsError, match=message):
        settings(**overrides)


@pytest.mark.parametrize("overrides", [
    {"gpu_capacity_type": "spot", "gpu_spot_interruptions": 20},
    # A public endpoint's CIDRs apply to public_and_private too (only a private endpoint has none).
    {"endpoint_access": "public_and_private", "endpoint_public_cidrs": ["203.0.113.0/24"]},
    {"endpoint_access": "public", "endpoint_public_cidrs": ["0.0.0.0/0"]},
    # Without an account the stack's account is whichever deploys it: an ARN of the stack's region passes.
    {"training.tracking": "wandb",
     "training.wandb_api_key_secret": "arn:aws:secretsmanager:us-east-2:111122223333:secret:wandb-AbCdEf"},
    {"account": "111122223333", "training.tracking": "wandb",
     "training.wandb_api_key_secret": "arn:aws:secretsmanager:us-east-2:111122223333:secret:wandb-AbCdEf"},
    {"training.tracking": "mlflow",
     "training.mlflow_tracking_uri": "arn:aws:sagemaker:us-east-2:111122223333:mlflow-tracking-server/team"},
], ids=["spot-interruptions-20", "public-and-private-cidrs", "public-open-on-purpose", "wandb-arn-no-account", "wandb-arn-same-account",
        "mlflow-arn-no-account"])
def test_accepted(overrides):
    settings(**overrides)


def warning_ids(**training) -> list[str]:
    from stacks.settings import Settings, TrainingSettings
    from stacks.validation import reproducibility_warnings

    return [key for key, _ in reproducibility_warnings(Settings(training=TrainingSettings(**training)))]


@pytest.mark.parametrize("training,ids", [
    # The defaults: a vX.Y tag (moves with security rebuilds) and a Hub model without a revision.
    ({}, ["eks-fsdp-efa:unpinned-image", "eks-fsdp-efa:unpinned-model"]),
    ({"image": "public.ecr.aws/x/ray:2.58.0-py311", "model_revision": "0" * 40}, []),
    ({"image": "public.ecr.aws/x/ray@sha256:" + "0" * 64, "model": "tiny"}, []),  # a built-in config, no weights
    ({"image": "public.ecr.aws/x/ray:2.58.0", "model": "/models/qwen"}, []),  # a path is what it holds
    ({"image": "public.ecr.aws/x/ray:latest", "model_revision": "main"}, ["eks-fsdp-efa:unpinned-image"]),
])
def test_a_synth_warns_of_each_moving_input_and_only_those(training, ids):
    assert warning_ids(**training) == ids


@pytest.mark.parametrize("cidr", ["0.0.0.0/16", "224.0.0.0/16", "240.0.0.0/16", "127.1.0.0/16"])
def test_every_range_aws_refuses_for_a_vpc_is_refused(cidr):
    # VPC User Guide, "VPC CIDR blocks": this-network, loopback, link-local, multicast and reserved ranges.
    with pytest.raises(SettingsError, match=rf"^vpc_cidr: '{cidr}' overlaps a range AWS refuses for VPCs"):
        settings(vpc_cidr=cidr)


def test_a_tag_may_hold_every_symbol_aws_allows():
    # AWS tag naming rules: letters, digits, spaces and _ . : / = + - @.
    settings(tags={"cost center_.:/=+-@": "team a_.:/=+-@"})
