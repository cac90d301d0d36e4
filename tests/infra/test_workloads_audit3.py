"""tools.seams.workloads: the refusals that stop the check rather than judge a role on a guess, and the workloads
that make no call where their service account has no Pod Identity association."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_workloads import pod_identity_role, tracked_job
from tests.infra.test_workloads_cases import two_buckets
from tools.seams import workloads as w
from tools.seams.cfn import Resolver, SeamError


def test_a_role_named_by_a_literal_arn_stops_the_check():
    # The role behind a literal ARN may be in another stack: its policies are not in this template.
    with pytest.raises(SeamError, match=r"^expected a Fn::GetAtt of a role's Arn, found "
                                        r"'arn:aws:iam::111122223333:role/nodes'$"):
        w.logical_id_of_arn("arn:aws:iam::111122223333:role/nodes")


def test_an_aws_managed_policy_not_copied_into_the_seams_stops_the_check():
    t = {"Resources": {"Mine": {"Type": "AWS::IAM::Role", "Properties": {
        "AssumeRolePolicyDocument": {"Statement": []},
        "ManagedPolicyArns": ["arn:aws:iam::aws:policy/AmazonSageMakerFullAccess"]}}}}
    with pytest.raises(SeamError, match=r"^Mine: AWS managed policy AmazonSageMakerFullAccess is not in "
                                        r"tools/seams/managed_policies.py$"):
        w.role_policies(Resolver(t), "Mine")


@pytest.mark.parametrize("service_account, calls", [("ray", 14), ("default", 0)])
def test_the_ray_pods_storage_calls_are_made_only_as_a_service_account_with_an_association(service_account, calls):
    # Two buckets, 2 bucket calls and 5 object calls each; a service account without a role makes none here.
    assert len(w.ray_calls(Resolver(two_buckets(), "us-east-2"), "training", service_account)) == calls


@pytest.mark.parametrize("manifests, calls", [
    ([tracked_job("--tracking=wandb", [{"name": "WANDB_API_KEY_SECRET", "value": "wandb-key"}])], 1),
    ([], 0),  # no RayJob: no trainer to track
], ids=["a RayJob tracking to W&B", "no RayJob"])
def test_tracking_calls_are_read_from_the_rayjob_only(manifests, calls):
    r = Resolver({"Resources": pod_identity_role("training", "ray", [])}, "us-east-2")
    assert len(w.tracking_calls(r, manifests)) == calls


def test_a_rayjob_whose_service_account_has_no_association_makes_no_tracking_call():
    r = Resolver({"Resources": pod_identity_role("training", "other", [])}, "us-east-2")
    assert w.tracking_calls(r, [tracked_job("--tracking=wandb", [{"name": "WANDB_API_KEY_SECRET", "value": "k"}])]) == []
