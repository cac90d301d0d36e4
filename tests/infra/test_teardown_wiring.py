"""tools/teardown.py's main wiring: a destroy needs only the stack's name and region, whatever auto stood for."""

from __future__ import annotations

import shutil

import boto3
from botocore.exceptions import NoCredentialsError

from tools import teardown

from tests.conftest import ROOT


class NoCredentials:
    def __init__(self, region_name=None):
        self.region_name = region_name

    def client(self, service):
        class CloudFormation:
            def get_template(self, **_):
                raise NoCredentialsError()
        return CloudFormation()


def test_auto_zone_with_nothing_looked_up_is_no_reason_to_refuse_a_destroy(monkeypatch, tmp_path, capsys):
    """With no cdk.context.json (another machine, a deleted file) the stack must still be destroyable: teardown
    goes on to ask AWS (here: no credentials) instead of refusing gpu_availability_zone=auto."""
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    monkeypatch.setattr(boto3, "Session", NoCredentials)
    rc = teardown.main(["--cdk-json", str(tmp_path / "cdk.json"), "-c", "gpu_availability_zone=auto"])
    assert rc == 2
    assert capsys.readouterr().err.startswith("error: no AWS credentials found")
