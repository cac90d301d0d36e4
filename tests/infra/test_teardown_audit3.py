"""tools/teardown.py's refusals: a stack it cannot read, a `cdk destroy` that failed or was cancelled, and a bucket or
key already gone; and the -c settings passed on to `cdk destroy`."""

from __future__ import annotations

import subprocess

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.infra.test_teardown_audit import _Session
from tools import teardown


def _destroy(monkeypatch, returncode=0, gone=True, argv=()):
    commands = []

    def cdk_destroy(command, cwd):
        commands.append(command)
        _Session.destroyed = gone
        return subprocess.CompletedProcess(command, returncode)

    _Session.destroyed = False
    monkeypatch.setattr(boto3, "Session", _Session)
    monkeypatch.setattr(subprocess, "run", cdk_destroy)
    return teardown.main(list(argv)), commands


def test_a_failed_cdk_destroy_returns_its_exit_code_and_says_the_stack_may_remain(monkeypatch, capsys):
    code, _ = _destroy(monkeypatch, returncode=3, gone=False)
    assert code == 3
    captured = capsys.readouterr()
    assert captured.err == "error: cdk destroy exited 3; the stack may still exist\n" and "kept on purpose" not in captured.out


def test_a_cancelled_destroy_says_nothing_was_deleted_and_lists_nothing(monkeypatch, capsys):
    code, _ = _destroy(monkeypatch, returncode=0, gone=False)
    assert code == 1
    captured = capsys.readouterr()
    assert captured.err == "stack EksFsdpEfa still exists (destroy cancelled?): nothing was deleted\n"
    assert "kept on purpose" not in captured.out


def test_context_settings_reach_cdk_destroy_as_c_pairs(monkeypatch, capsys):
    code, commands = _destroy(monkeypatch, argv=["-c", "gpu_node_count=4"])
    assert code == 0
    assert commands[0][:5] == ["cdk", "destroy", "EksFsdpEfa", "-c", "gpu_node_count=4"]


def test_a_stack_that_cannot_be_read_is_named_with_its_region(monkeypatch, capsys):
    class Unreadable(_Session):
        def client(self, service):
            class CloudFormation:
                def get_template(self, **_):
                    raise ClientError({"Error": {"Code": "ValidationError",
                                                 "Message": "Stack with id EksFsdpEfa does not exist"}}, "GetTemplate")
            return CloudFormation()

    monkeypatch.setattr(boto3, "Session", Unreadable)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("nothing is destroyed when the stack is unreadable"))
    assert teardown.main([]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read stack EksFsdpEfa in us-east-2: An error occurred "
                                              "(ValidationError)")


def test_a_key_that_cannot_be_described_is_not_listed():
    class Kms:
        class exceptions:
            ClientError = ClientError

        def describe_key(self, KeyId):
            raise ClientError({"Error": {"Code": "NotFoundException", "Message": "gone"}}, "DescribeKey")

    assert teardown.describe_key(Kms(), "key-1") is None


def test_a_bucket_already_gone_is_not_listed():
    class S3:
        class exceptions:
            ClientError = ClientError

        def head_bucket(self, Bucket):
            raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadBucket")

    assert teardown.describe_bucket(S3(), "ckpt") is None


def test_no_credentials_says_how_to_log_in_and_destroys_nothing(monkeypatch, capsys):
    from botocore.exceptions import NoCredentialsError

    class NoCredentials(_Session):
        def client(self, service):
            class CloudFormation:
                def get_template(self, **_):
                    raise NoCredentialsError()
            return CloudFormation()

    monkeypatch.setattr(boto3, "Session", NoCredentials)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("nothing is destroyed without credentials"))
    assert teardown.main([]) == 2
    assert capsys.readouterr().err == ("error: no AWS credentials found; run `aws configure` or `aws sso login` "
                                       "first\n")
