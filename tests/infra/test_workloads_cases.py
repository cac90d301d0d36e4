"""Each workload's AWS calls (tools.seams.workloads), case by case on small templates: which calls are made, on
which ARN, and when none is."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_workloads import APP, SERVER, autoscaler_template, pod_identity_role, tracked_job
from tools.seams import workloads as w
from tools.seams.cfn import ACCOUNT, Resolver


@pytest.mark.parametrize("image, repository", [
    ("111122223333.dkr.ecr.us-east-2.amazonaws.com/ray/train:v1", "arn:aws:ecr:us-east-2:111122223333:repository/ray/train"),
    ("111122223333.dkr.ecr.us-east-2.amazonaws.com/ray/train@sha256:0a1b",
     "arn:aws:ecr:us-east-2:111122223333:repository/ray/train"),
    ("111122223333.dkr.ecr.us-east-2.amazonaws.com/ray/train:v1@sha256:0a1b",
     "arn:aws:ecr:us-east-2:111122223333:repository/ray/train"),
    ("444455556666.dkr.ecr.eu-west-1.amazonaws.com/train", "arn:aws:ecr:eu-west-1:444455556666:repository/train"),
    ("public.ecr.aws/deep-learning-containers/ray:v1", None),
    ("docker.io/rayproject/ray:2.58.0", None),
])
def test_the_repository_arn_of_an_image(image, repository):
    # An image reference is name[:tag][@digest]; ECR's repository ARN is arn:aws:ecr:<region>:<account>:repository/<name>
    # (Service Authorization Reference, Amazon ECR resource types), the region and account from the registry host.
    assert w.ecr_repository_arn(image) == repository


def test_a_secret_named_by_its_arn_is_read_on_that_arn():
    arn = "arn:aws:secretsmanager:eu-west-1:444455556666:secret:wandb-key-AbCdEf"
    r = Resolver({"Resources": pod_identity_role("training", "ray", [])}, "us-east-2")
    [call] = w.tracking_calls(r, [tracked_job("--tracking=wandb", [{"name": "WANDB_API_KEY_SECRET", "value": arn}])])
    assert (call.request.action, call.request.resource) == ("secretsmanager:GetSecretValue", arn)


def test_a_secret_named_by_its_name_is_read_in_the_stacks_region_and_account():
    r = Resolver({"Resources": pod_identity_role("training", "ray", [])}, "eu-west-1")
    [call] = w.tracking_calls(r, [tracked_job("--tracking=wandb", [{"name": "WANDB_API_KEY_SECRET", "value": "wandb-key"}])])
    assert call.request.resource == f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT}:secret:wandb-key-AbCdEf"


@pytest.mark.parametrize("tracking, calls", [("mlflow", 7), ("wandb", 0), ("none", 0)])
def test_mlflow_calls_are_made_only_when_the_tracker_is_mlflow(tracking, calls):
    # training/tracking.py builds an MLflow client only for --tracking=mlflow; a tracking URI left in the options
    # for another tracker is never called.
    r = Resolver({"Resources": pod_identity_role("training", "ray", [])}, "us-east-2")
    job = tracked_job(f"--tracking={tracking} --mlflow-tracking-uri={SERVER}")
    assert len(w.tracking_calls(r, [job])) == calls


@pytest.mark.parametrize("uri, action", [(SERVER, "sagemaker-mlflow:CreateRun"), (APP, "sagemaker:CallMlflowAppApi")])
def test_each_mlflow_call_is_authorized_as_its_resource_types_action(uri, action):
    r = Resolver({"Resources": pod_identity_role("training", "ray", [])}, "us-east-2")
    calls = w.tracking_calls(r, [tracked_job(f"--tracking=mlflow --mlflow-tracking-uri={uri}")])
    assert action in {c.request.action for c in calls} and {c.request.resource for c in calls} == {uri}


@pytest.mark.parametrize("scaling, resized", [
    ({"MinSize": 0, "MaxSize": 2, "DesiredSize": 0}, True), ({"MinSize": 1, "MaxSize": 2, "DesiredSize": 1}, True),
    ({"MinSize": 2, "MaxSize": 2, "DesiredSize": 2}, False)])
def test_the_autoscaler_is_judged_on_every_group_it_may_resize(scaling, resized):
    # Cluster Autoscaler resizes a group between its min and max: a group of min 1, max 2 is resized too.
    t = autoscaler_template({"Fn::GetAtt": ["Gpu", "NodegroupName"]})
    t["Resources"]["Gpu"]["Properties"]["ScalingConfig"] = scaling
    actions = {c.request.action for c in w.autoscaler_calls(Resolver(t, "us-east-2"))}
    assert ("autoscaling:SetDesiredCapacity" in actions) is resized


def test_the_asg_carries_the_autoscalers_discovery_tags():
    # EKS User Guide, managed node groups: the ASG is tagged k8s.io/cluster-autoscaler/enabled and
    # k8s.io/cluster-autoscaler/<cluster-name> (what --node-group-auto-discovery matches), plus eks:* names.
    t = autoscaler_template({"Fn::GetAtt": ["Gpu", "NodegroupName"]})
    assert w.asg_tags(Resolver(t, "us-east-2"), "Gpu") == {
        "eks:cluster-name": "demo", "eks:nodegroup-name": "<AWS::EKS::Nodegroup generated-name Gpu>",
        "k8s.io/cluster-autoscaler/enabled": "true", "k8s.io/cluster-autoscaler/demo": "owned"}


def test_a_group_whose_type_is_on_the_group_needs_no_launch_template_read():
    # aws_wrapper.go getInstanceTypeByLaunchTemplate runs only for a group whose type is in its launch template.
    t = autoscaler_template({"Fn::GetAtt": ["Gpu", "NodegroupName"]})
    t["Resources"]["Template"] = {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": {}}}
    t["Resources"]["Gpu"]["Properties"]["LaunchTemplate"] = {"Id": {"Ref": "Template"}}
    t["Resources"]["Gpu"]["Properties"]["InstanceTypes"] = ["g6.12xlarge"]
    reads = [c for c in w.autoscaler_calls(Resolver(t, "us-east-2")) if "launch-template/" in c.request.resource]
    assert reads == []
    t["Resources"]["Template"]["Properties"]["LaunchTemplateData"]["InstanceType"] = "p5.48xlarge"
    [read] = [c for c in w.autoscaler_calls(Resolver(t, "us-east-2")) if "launch-template/" in c.request.resource]
    assert read.request.action == "ec2:DescribeLaunchTemplateVersions"


def test_the_ray_pods_run_as_the_heads_service_account_or_default():
    # A pod without serviceAccountName runs as "default" (Kubernetes, service accounts).
    job = tracked_job("")
    assert w.ray_service_account([job]) == ("training", "ray")
    del job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"]
    assert w.ray_service_account([job]) == ("training", "default")


def two_buckets() -> dict:
    """The Ray pods' role may use every bucket; bucket Other's policy denies everyone."""
    grant = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
    deny = {"Statement": [{"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*", "Resource": "*"}]}
    return {"Resources": {
        **pod_identity_role("training", "ray", grant),
        "Checkpoints": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "checkpoints"}},
        "Other": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "other"}},
        "OtherPolicy": {"Type": "AWS::S3::BucketPolicy", "Properties": {"Bucket": {"Ref": "Other"}, "PolicyDocument": deny}}}}


def test_a_buckets_policy_judges_only_the_calls_on_that_bucket():
    # A bucket policy is a resource-based policy of its own bucket: Other's Deny does not reach the checkpoints.
    denials = w.denials(w.ray_calls(Resolver(two_buckets(), "us-east-2"), "training", "ray"))
    assert len(denials) == 7 and {d.call.request.resource.split(":::")[1].split("/")[0] for d in denials} == {"other"}


def test_the_ray_pods_storage_calls_go_over_tls():
    # pyarrow's S3 filesystem speaks HTTPS: the request context holds aws:SecureTransport true, which a bucket's
    # TLS-only Deny (Bool aws:SecureTransport false) lets through and an Allow on it requires.
    calls = w.ray_calls(Resolver(two_buckets(), "us-east-2"), "training", "ray")
    assert calls and all(c.request.context == {"aws:SecureTransport": "true"} for c in calls)


def test_the_observability_agents_write_every_container_insights_log_group():
    """Container Insights' log groups /aws/containerinsights/<cluster>/{application,dataplane,host} (Fluent Bit)
    and performance (the CloudWatch agent): streams created and described on the group, events put on a stream."""
    t = {"Resources": {"Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
                       **pod_identity_role("amazon-cloudwatch", "cloudwatch-agent", [])}}
    group = "arn:aws:logs:us-east-2:111122223333:log-group:/aws/containerinsights/demo/"
    logs = {(c.workload, c.request.action, c.request.resource)
            for c in w.observability_calls(Resolver(t, "us-east-2")) if c.request.action.startswith("logs:")}
    assert logs == {(workload, action, group + name + suffix)
                    for workload, name in (("CloudWatch agent", "performance"), ("Fluent Bit", "application"),
                                           ("Fluent Bit", "dataplane"), ("Fluent Bit", "host"))
                    for action, suffix in (("logs:CreateLogStream", ""), ("logs:DescribeLogStreams", ""),
                                           ("logs:PutLogEvents", ":log-stream:<stream>"))}
