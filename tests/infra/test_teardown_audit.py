"""tools/teardown.py's reading of what `cdk destroy` leaves: worked examples with fake AWS answers."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tools import teardown


def test_retained_resources_are_those_whose_deletion_policy_keeps_them():
    # CloudFormation's DeletionPolicy: Retain and RetainExceptOnCreate keep the resource when the stack is deleted;
    # Delete and Snapshot do not leave it (a snapshot is not the resource).
    template = {"Resources": {
        "Bucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"},
        "Key": {"Type": "AWS::KMS::Key", "DeletionPolicy": "RetainExceptOnCreate"},
        "Logs": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete"},
        "Volume": {"Type": "AWS::EC2::Volume", "DeletionPolicy": "Snapshot"},
        "Vpc": {"Type": "AWS::EC2::VPC"},
    }}
    assert teardown.retained_logical_ids(template) == {"Bucket": "AWS::S3::Bucket", "Key": "AWS::KMS::Key"}


class _Kms:
    class exceptions:
        ClientError = ClientError

    def __init__(self, state: str):
        self.state = state

    def describe_key(self, KeyId):
        return {"KeyMetadata": {"KeyState": self.state}}


@pytest.mark.parametrize("state,kept", [("Enabled", True), ("Disabled", True),
                                        ("PendingDeletion", False), ("PendingReplicaDeletion", False)])
def test_a_key_already_scheduled_for_deletion_is_not_reported_as_kept(state, kept):
    # KMS KeyState: a key pending (replica) deletion goes on its own; an enabled or disabled one bills monthly.
    found = teardown.describe_key(_Kms(state), "key-1")
    assert (found is not None) is kept
    if kept:
        assert found.delete_with == "aws kms schedule-key-deletion --key-id key-1 --pending-window-in-days 7"


class _S3:
    class exceptions:
        ClientError = ClientError

    def head_bucket(self, Bucket):
        return {}

    def get_paginator(self, name):
        assert name == "list_object_versions"
        pages = [{"Versions": [{"Size": 2**30}, {"Size": 2**29}]}, {"Versions": [{"Size": 2**29}]}, {}]
        return type("Paginator", (), {"paginate": lambda self, Bucket: pages})()


def test_a_kept_buckets_size_is_the_sum_of_every_version_on_every_page():
    kept = teardown.describe_bucket(_S3(), "ckpt")
    assert kept.detail.startswith("3 object version(s), 2.00 GiB")


def test_log_prefixes_name_the_cluster_for_eks_and_container_logs_and_the_stack_for_lambdas():
    # EKS writes /aws/eks/<cluster>/cluster, Fluent Bit and the agent /aws/containerinsights/<cluster>/..., and Lambda
    # /aws/lambda/<function>, whose name CloudFormation starts with the stack's.
    assert teardown.log_group_prefixes("MyStack", "MyCluster") == [
        "/aws/eks/MyCluster/", "/aws/lambda/MyStack-", "/aws/containerinsights/MyCluster/"]
