"""cdk_constructs/training_workload.py case by case: the Ray pods' grant on the checkpoint bucket, as IAM evaluates
it for the requests Ray Train's storage and boto3 make, and the bucket's lifecycle rule."""

from __future__ import annotations

import json

import pytest

from cdk_constructs.training_workload import checkpoint_lifecycle_rules
from tests.conftest import CAPACITY_BLOCK, template_for
from tools.seams.iam import Policy, Request, evaluate

BUCKET_ARN = "arn:aws:s3:::ckpt-bucket"
ROLE_ARN = "arn:aws:iam::123456789012:role/ray"


def _resolve(value, arns: dict[str, str]):
    """The two intrinsics CDK writes for a bucket's ARNs: Fn::GetAtt [bucket, Arn] and Fn::Join of it and '/*'."""
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return arns.get(value["Fn::GetAtt"][0], "arn:aws:unresolved")
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_resolve(p, arns) for p in parts)
    if isinstance(value, list):
        return [_resolve(v, arns) for v in value]
    return value


def ray_role_policies(template) -> list[Policy]:
    """The policies of a deployment's Ray pods' role (the role trusting the `ray` service account), the checkpoint
    bucket's ARN resolved as CloudFormation does."""
    resources = template.to_json()["Resources"]
    arns = {name: BUCKET_ARN for name, r in resources.items() if r["Type"] == "AWS::S3::Bucket" and "Checkpoints" in name}
    [role] = [name for name, r in resources.items() if r["Type"] == "AWS::IAM::Role"
              and '"ray"' in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    return [Policy(name, {"Statement": [{**s, "Resource": _resolve(s["Resource"], arns)}
                                        for s in r["Properties"]["PolicyDocument"]["Statement"]]})
            for name, r in resources.items() if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]]


@pytest.fixture(scope="module")
def checkpoint_policy(template) -> list[Policy]:
    return ray_role_policies(template)


# Service Authorization Reference, Amazon S3: ListBucket (ListObjectsV2, what Ray Train's storage checks and
# resume call) and GetBucketLocation authorize on the bucket resource (arn:aws:s3:::bucket); the object actions
# on an object (arn:aws:s3:::bucket/key). A bucket action granted on bucket/* never matches.
@pytest.mark.parametrize("action,resource", [
    ("s3:ListBucket", BUCKET_ARN),
    ("s3:GetBucketLocation", BUCKET_ARN),
    ("s3:GetObject", f"{BUCKET_ARN}/runs/run-1/checkpoint_000001/model.safetensors"),
    ("s3:PutObject", f"{BUCKET_ARN}/runs/run-1/checkpoint_000001/model.safetensors"),
    ("s3:DeleteObject", f"{BUCKET_ARN}/runs/run-1/checkpoint_000001/model.safetensors"),
    ("s3:AbortMultipartUpload", f"{BUCKET_ARN}/runs/run-1/checkpoint_000001/model.safetensors"),
    ("s3:ListMultipartUploadParts", f"{BUCKET_ARN}/runs/run-1/checkpoint_000001/model.safetensors"),
])
def test_the_ray_pods_may_make_each_storage_request_on_the_checkpoint_bucket(checkpoint_policy, action, resource):
    assert evaluate(checkpoint_policy, Request(ROLE_ARN, action, resource, {})).allowed


@pytest.mark.parametrize("action,resource", [
    ("s3:ListBucket", "arn:aws:s3:::another-bucket"),
    ("s3:GetObject", "arn:aws:s3:::another-bucket/runs/x"),
    ("s3:PutObject", "arn:aws:s3:::ckpt-bucket-2/runs/x"),
    ("s3:DeleteBucket", BUCKET_ARN),
    ("s3:PutBucketPolicy", BUCKET_ARN),
    ("s3:PutObjectAcl", f"{BUCKET_ARN}/runs/x"),
])
def test_the_ray_pods_may_do_nothing_else_and_nowhere_else(checkpoint_policy, action, resource):
    assert not evaluate(checkpoint_policy, Request(ROLE_ARN, action, resource, {})).allowed


@pytest.mark.parametrize("days", [1, 7, 30])
def test_old_checkpoint_versions_expire_after_the_days_given_and_abandoned_uploads_after_one(days):
    (rule,) = checkpoint_lifecycle_rules(days)
    assert rule.noncurrent_version_expiration.to_days() == days
    assert rule.abort_incomplete_multipart_upload_after.to_days() == 1
    assert rule.expired_object_delete_marker is True


def _job(**spec) -> dict:
    container = {"name": "ray", "image": "rayproject/ray:2.58.0"}
    cluster = {"rayVersion": "2.58.0", "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}},
               "workerGroupSpecs": [{"groupName": "gpu", "minReplicas": 2, "maxReplicas": 2, "rayStartParams": {},
                                     "template": {"spec": {"containers": [container]}}}]}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "ft-run", "namespace": "training"},
            "spec": {"entrypoint": "python -m training.train", "rayClusterSpec": cluster, **spec}}


def _check(manifest: dict, gates: dict) -> None:
    """TrainingWorkload's synth check on a manifest and the operator's gates, without a synthesis."""
    from types import SimpleNamespace

    from cdk_constructs.training_workload import TrainingWorkload

    TrainingWorkload._check_with_kuberay(SimpleNamespace(ray_job_manifest=manifest),
                                         SimpleNamespace(kuberay_feature_gates=gates))


def test_synth_refuses_a_job_kuberay_would_refuse_naming_the_rule():
    with pytest.raises(ValueError, match=r"^RayJob ft-run: activeDeadlineSeconds must be a positive integer, got 0 "
                                         r"\[KubeRay v1.7 ValidateRayJobSpec\]$"):
        _check(_job(activeDeadlineSeconds=0), {})


@pytest.mark.parametrize("gate,refused", [(False, True), (True, False)])
def test_the_operators_feature_gates_reach_the_synth_check(gate, refused):
    # A deletion strategy is refused only with the RayJobDeletionPolicy gate off (validateDeletionConfiguration).
    manifest = _job(deletionStrategy={"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteCluster"}})
    if refused:
        with pytest.raises(ValueError, match="deletionStrategy needs the RayJobDeletionPolicy feature gate"):
            _check(manifest, {"RayJobDeletionPolicy": gate})
    else:
        _check(manifest, {"RayJobDeletionPolicy": gate})


def _checkpoint_bucket(template) -> tuple[str, dict]:
    [(name, bucket)] = [(n, r) for n, r in template.to_json()["Resources"].items()
                        if r["Type"] == "AWS::S3::Bucket" and "Checkpoints" in n]
    return name, bucket


def test_the_checkpoint_bucket_refuses_requests_over_plain_http(template):
    # S3 User Guide, "Enforce encryption of data in transit": a bucket policy denying s3:* when
    # aws:SecureTransport is false, on the bucket and its objects.
    name, _ = _checkpoint_bucket(template)
    [policy] = [r["Properties"]["PolicyDocument"] for r in template.to_json()["Resources"].values()
                if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": name}]
    denies = [s for s in policy["Statement"] if s["Effect"] == "Deny"
              and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}]
    assert len(denies) == 1 and denies[0]["Action"] == "s3:*"
    resources = _resolve(denies[0]["Resource"], {name: BUCKET_ARN})
    assert sorted(resources) == [BUCKET_ARN, f"{BUCKET_ARN}/*"]


def test_the_checkpoint_bucket_is_versioned_encrypted_and_private(template):
    _, bucket = _checkpoint_bucket(template)
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["BucketEncryption"] == {"ServerSideEncryptionConfiguration": [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
    assert props["PublicAccessBlockConfiguration"] == {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                                       "IgnorePublicAcls": True, "RestrictPublicBuckets": True}


def test_the_tracking_server_of_the_settings_reaches_the_ray_pods_grant():
    # training.mlflow_tracking_uri (a SageMaker tracking server) is the resource of the pods' MLflow calls; the
    # Capacity Block deployment's template is shared with the other files that check it.
    server = CAPACITY_BLOCK["training.mlflow_tracking_uri"]
    policies = ray_role_policies(template_for(**CAPACITY_BLOCK))
    assert evaluate(policies, Request(ROLE_ARN, "sagemaker-mlflow:CreateRun", server, {})).allowed
    assert not evaluate(policies, Request(ROLE_ARN, "sagemaker-mlflow:CreateRun", server + "-other", {})).allowed


@pytest.mark.parametrize("account", ["default", "ray"])
def test_neither_service_account_of_the_training_namespace_mounts_an_api_token(template, account):
    # Ray reads nothing in the Kubernetes API; EKS Pod Identity mounts its own token whatever this says.
    from tests.infra.test_cluster_software import manifests

    [sa] = [m for m in manifests(template) if m["kind"] == "ServiceAccount" and m["metadata"]["name"] == account
            and m["metadata"]["namespace"] == "training"]
    assert sa["automountServiceAccountToken"] is False
