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


class _Session:
    """boto3 as `make destroy` meets it: a stack whose outputs name its cluster, gone after `cdk destroy`."""

    def __init__(self, region_name=None):
        self.asked_prefixes: list[str] = []
        _Session.last = self

    def client(self, service):
        session = self

        class CloudFormation:
            destroyed = False

            def get_template(self, **_):
                return {"TemplateBody": {"Resources": {
                    "Bucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"},
                    "Unnamed": {"Type": "AWS::SSM::Parameter", "DeletionPolicy": "Retain"},
                    "Key": {"Type": "AWS::KMS::Key", "DeletionPolicy": "Retain"},
                    "Param": {"Type": "AWS::SSM::Parameter", "DeletionPolicy": "Retain"}}}}

            def describe_stack_resources(self, **_):
                return {"StackResources": [
                    {"LogicalResourceId": "Bucket", "PhysicalResourceId": "ckpt", "ResourceType": "AWS::S3::Bucket"},
                    {"LogicalResourceId": "Unnamed", "ResourceType": "AWS::SSM::Parameter"},
                    {"LogicalResourceId": "Key", "PhysicalResourceId": "key-1", "ResourceType": "AWS::KMS::Key"},
                    {"LogicalResourceId": "Param", "PhysicalResourceId": "/kept", "ResourceType": "AWS::SSM::Parameter"},
                    {"LogicalResourceId": "Rule", "PhysicalResourceId": "ecr-public",
                     "ResourceType": "AWS::ECR::PullThroughCacheRule"}]}

            def describe_stacks(self, **_):
                if _Session.destroyed:
                    raise ClientError({"Error": {"Code": "ValidationError", "Message": "does not exist"}}, "DescribeStacks")
                return {"Stacks": [{"Outputs": [{"OutputKey": "ClusterName", "OutputValue": "TeamCluster"}]}]}

        class Logs:
            def get_paginator(self, name):
                def paginate(logGroupNamePrefix):
                    session.asked_prefixes.append(logGroupNamePrefix)
                    return [{"logGroups": []}]
                return type("P", (), {"paginate": staticmethod(paginate)})()

        class Ecr:
            def get_paginator(self, name):
                pages = {"describe_repositories": [{"repositories": [{"repositoryName": "ecr-public/ray"}]}],
                         "describe_images": [{"imageDetails": [{"imageSizeInBytes": 2**30}]}]}[name]
                return type("P", (), {"paginate": lambda self, **_: pages})()

        return {"cloudformation": CloudFormation, "s3": _S3, "kms": lambda: _Kms("Enabled"), "logs": Logs,
                "ecr": Ecr}[service]()


def test_make_destroy_reports_every_kept_resource_and_reads_logs_under_the_clusters_own_name(monkeypatch, capsys):
    import subprocess

    import boto3

    _Session.destroyed = False

    def cdk_destroy(command, cwd):
        assert command[:3] == ["cdk", "destroy", "EksFsdpEfa"]
        _Session.destroyed = True
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(boto3, "Session", _Session)
    monkeypatch.setattr(subprocess, "run", cdk_destroy)
    assert teardown.main([]) == 0
    out = capsys.readouterr().out
    # A retained resource without a physical id (never created) is skipped, not the end of the list.
    for line in ("S3 bucket ckpt: 3 object version(s), 2.00 GiB", "KMS key key-1: Enabled",
                 "AWS::SSM::Parameter /kept: retained by its DeletionPolicy", "ECR repository ecr-public/ray: 1.00 GiB"):
        assert line in out
    # The cluster's name from the stack's outputs (it may differ from the settings' when deployed under another name).
    assert "/aws/eks/TeamCluster/" in _Session.last.asked_prefixes
