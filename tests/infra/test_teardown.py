"""What `make destroy` reports as kept: retained resources read from the synthesized template."""

from __future__ import annotations

import boto3
from moto import mock_aws

from tools import teardown


def test_retained_resources_are_the_bucket_and_the_secrets_key(template):
    retained = teardown.retained_logical_ids(template.to_json())
    assert sorted(retained.values()) == ["AWS::KMS::Key", "AWS::S3::Bucket"]


def test_bucket_report_counts_every_version(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-2")
        s3.create_bucket(Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        s3.put_bucket_versioning(Bucket="ckpt", VersioningConfiguration={"Status": "Enabled"})
        for body in (b"a" * 1024, b"b" * 2048):
            s3.put_object(Bucket="ckpt", Key="runs/run/run_summary.json", Body=body)
        kept = teardown.describe_bucket(s3, "ckpt")
        assert kept.detail.startswith("2 object version(s)")
        assert teardown.describe_bucket(s3, "gone") is None


def test_report_lists_each_kept_resource_with_its_delete_command():
    report = teardown.kept_report([teardown.Kept("S3 bucket", "ckpt", "2 object version(s)", "empty it, then delete")])
    assert report.splitlines() == ["kept on purpose (still billed until you delete it):",
                                   "  S3 bucket ckpt: 2 object version(s)", "    delete: empty it, then delete"]


def test_nothing_kept_says_so():
    assert teardown.kept_report([]).startswith("nothing was kept")


def test_leftover_log_groups_are_listed_with_size_retention_and_delete_command(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        logs = boto3.client("logs", region_name="us-east-2")
        logs.create_log_group(logGroupName="/aws/eks/EksFsdpEfa/cluster")
        logs.put_retention_policy(logGroupName="/aws/eks/EksFsdpEfa/cluster", retentionInDays=30)
        logs.create_log_group(logGroupName="/aws/lambda/EksFsdpEfa-KubectlHandler-abc")
        logs.create_log_group(logGroupName="/aws/lambda/OtherStack-Handler-xyz")
        kept = teardown.leftover_log_groups(logs, teardown.log_group_prefixes("EksFsdpEfa", "EksFsdpEfa"))
    assert [k.name for k in kept] == ["/aws/eks/EksFsdpEfa/cluster", "/aws/lambda/EksFsdpEfa-KubectlHandler-abc"]
    assert kept[0].detail.endswith("expires after 30 days") and kept[1].detail.endswith("never expires")
    assert kept[1].delete_with == "aws logs delete-log-group --log-group-name /aws/lambda/EksFsdpEfa-KubectlHandler-abc"


def test_leftover_container_logs_are_listed_too(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        logs = boto3.client("logs", region_name="us-east-2")
        logs.create_log_group(logGroupName="/aws/containerinsights/EksFsdpEfa/application")
        logs.create_log_group(logGroupName="/aws/containerinsights/Other/application")
        kept = teardown.leftover_log_groups(logs, teardown.log_group_prefixes("EksFsdpEfa", "EksFsdpEfa"))
    assert [k.name for k in kept] == ["/aws/containerinsights/EksFsdpEfa/application"]


def test_the_pull_through_caches_repositories_are_listed_with_size_and_delete_command(monkeypatch):
    # ECR creates a cached repository at the first pull, outside the stack: `cdk destroy` leaves it billing storage.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        ecr = boto3.client("ecr", region_name="us-east-2")
        for name in ("ecr-public/deep-learning-containers/ray", "ecr-publications/app", "mine"):
            ecr.create_repository(repositoryName=name)
        kept = teardown.cached_repositories(ecr, "ecr-public")
    assert [(k.kind, k.name) for k in kept] == [("ECR repository", "ecr-public/deep-learning-containers/ray")]
    assert kept[0].detail == "0.00 GiB of cached images (pull-through cache)"
    assert kept[0].delete_with == "aws ecr delete-repository --repository-name ecr-public/deep-learning-containers/ray --force"
