"""tools/watch.py's follow_job against a scripted API: it reads the newest submitter pod of the job (by the job-name
label the Job controller puts on its pods; KubeRay names the submitter Job after the RayJob), prints its step lines
but not their machine-readable twins, and hands the job's end and run folder to the measured bill."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.infra.test_cluster_status import load
from tests.infra.test_report import records
from tests.infra.test_watch_wiring import seen  # noqa: F401 - the fixture faking the stack, the API and the bill
from training.records import format_record


def _pod(name: str, minute: int):
    meta = type("Meta", (), {"name": name, "creation_timestamp": dt.datetime(2026, 12, 1, 9, minute)})()
    return type("Pod", (), {"metadata": meta})()


LOGS = {
    "ft-1-old": "step 1/10 from the first attempt\n",
    "ft-1-new": "\n".join(["step 10/10 loss 1.2",
                           format_record(records(steps=1, with_validation=False)[0]),
                           'run summary: {"run": "s3://bucket/runs/ft-1"}']) + "\n",
}


class _Api:
    selectors: list = []

    def get_namespaced_custom_object(self, *args):
        rayjob = load("rayjob-running.json")
        rayjob["status"] |= {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": "2026-12-01T10:00:00Z"}
        return rayjob

    def list_namespaced_pod(self, namespace, label_selector=None):
        _Api.selectors.append(label_selector)
        return type("PodList", (), {"items": [_pod("ft-1-old", 5), _pod("ft-1-new", 30)]})()

    def read_namespaced_pod_log(self, name, namespace):
        return LOGS[name]


def test_the_newest_submitter_pods_log_is_followed_and_the_end_handed_on(monkeypatch, capsys):
    from kubernetes import client

    from tools import watch

    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: _Api())
    monkeypatch.setattr(client, "CoreV1Api", lambda _: _Api())
    monkeypatch.setattr(watch, "print_report", lambda run: None)
    finished: dict = {}
    assert watch.follow_job(None, "training", "ft-1", "bucket", 15, 3600, finished=finished) is True
    assert _Api.selectors == ["job-name=ft-1"]
    out = capsys.readouterr().out
    assert "step 10/10 loss 1.2" in out and "from the first attempt" not in out
    assert "eks-fsdp-efa.step" not in out
    assert finished == {"end": "2026-12-01T10:00:00Z", "run": "s3://bucket/runs/ft-1"}


def test_the_eks_token_signs_the_clusters_name_as_aws_iam_authenticator_requires(monkeypatch):
    # aws-iam-authenticator (pkg/token) accepts a presigned GetCallerIdentity whose signed x-k8s-aws-id header holds
    # the cluster's name: a token signed for another value is refused by that cluster's API server.
    import boto3
    from botocore.signers import RequestSigner

    from tools.watch import eks_token

    signed = []
    presign = RequestSigner.generate_presigned_url
    monkeypatch.setattr(RequestSigner, "generate_presigned_url",
                        lambda self, request, **kw: signed.append(request) or presign(self, request, **kw))
    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-2")
    eks_token(session, "team-cluster", "eu-west-1")
    [request] = signed
    assert request["headers"] == {"x-k8s-aws-id": "team-cluster"}
    assert request["url"].startswith("https://sts.eu-west-1.amazonaws.com/?Action=GetCallerIdentity")


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_eks_api_says_how_to_get_cluster_access(seen, monkeypatch, capsys, status):  # noqa: F811
    # The API server answers 401 to a token it cannot verify and 403 to an identity without an access entry: both
    # mean the caller has no access to this cluster, which admin_principal_arn gives.
    from kubernetes.client.rest import ApiException

    from tests.conftest import ROOT
    from tools import watch

    def refused(*args):
        raise ApiException(status=status, reason="Forbidden")

    monkeypatch.setattr(watch, "follow_job", refused)
    assert watch.main(["--cdk-json", str(ROOT / "cdk.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: the EKS API refused these credentials ({status}); give your role "
                                              "cluster access with -c admin_principal_arn=<its ARN>")


def test_the_token_has_no_base64_padding_and_is_renewed_before_eks_expires_it():
    # aws-iam-authenticator decodes the token as unpadded URL-safe base64, and accepts it for 15 minutes.
    import boto3

    from tools import watch

    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-2")
    # Three name lengths: one of them makes the signed URL's length one that base64 would pad.
    assert not [name for name in ("c", "cl", "clu") if "=" in watch.eks_token(session, name, "us-east-2")]
    assert watch.TOKEN_LIFETIME_S < 15 * 60
