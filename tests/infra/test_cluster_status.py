"""Status interpretation on recorded API objects (tests/data/k8s): nodes, RayJobs, trainer logs."""

from __future__ import annotations

import functools
import json

import jsonschema
import pytest
import yaml

from tests.conftest import DATA, fake_aws_credentials
from tools import cluster_status as cs

K8S = DATA / "k8s"


def load(name: str) -> dict:
    return json.loads((K8S / name).read_text())


@functools.lru_cache(maxsize=1)
def rayjob_status_schema() -> dict:
    crd = yaml.load((DATA / "kuberay-v1.7.0" / "ray.io_rayjobs.yaml").read_text(), Loader=yaml.CSafeLoader)
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return v1["schema"]["openAPIV3Schema"]["properties"]["status"]


@pytest.mark.parametrize("name", sorted(p.name for p in K8S.glob("rayjob-*.json")))
def test_recorded_rayjob_status_fits_kuberay_schema(name):
    """The fixtures are only worth as much as their shape: check them against KubeRay 1.7's CRD."""
    jsonschema.validate(load(name)["status"], rayjob_status_schema())


def test_ready_node_with_gpus_and_efa_is_ok():
    report = cs.node_report(load("node-ready.json"), expected_gpus=4, expected_efa=1)
    assert report.ok and (report.gpus, report.efa) == (4, 1)


def test_node_without_efa_names_the_missing_plugin():
    report = cs.node_report(load("node-no-efa.json"), 4, 1, plugin_pods_on_node=["nvidia-device-plugin-x2k9d"])
    assert report.missing == [
        "vpc.amazonaws.com/efa 0 of 1 allocatable: the EFA device plugin has no pod on this node "
        "(taint toleration, node selector or allowlist?)"]


def test_node_without_efa_but_with_its_plugin_pod_is_waiting_for_registration():
    report = cs.node_report(load("node-no-efa.json"), 4, 1,
                            plugin_pods_on_node=["nvidia-device-plugin-x2k9d", "aws-efa-k8s-device-plugin-7hq2c"])
    assert report.missing == ["vpc.amazonaws.com/efa 0 of 1 allocatable: its plugin pod runs but has not registered them yet"]


def test_not_ready_node_says_why_and_what_is_missing():
    report = cs.node_report(load("node-not-ready.json"), 4, 1)
    assert report.missing[0] == "not Ready (KubeletNotReady)"
    assert report.missing[1].startswith("nvidia.com/gpu 0 of 4 allocatable: the NVIDIA device plugin has no pod")


def test_too_few_nodes_is_reported_before_node_problems():
    reports = [cs.node_report(load("node-no-efa.json"), 4, 1)]
    ready, lines = cs.nodes_verdict(reports, expected_nodes=2)
    assert not ready
    assert lines[0] == "1 of 2 GPU nodes have joined the cluster"
    assert lines[1].startswith("ip-10-0-12-35.us-east-2.compute.internal: vpc.amazonaws.com/efa 0 of 1")


def test_all_nodes_ready():
    reports = [cs.node_report(load("node-ready.json"), 4, 1)] * 2
    assert cs.nodes_verdict(reports, 2) == (True, [])


def test_initializing_job_is_not_terminal():
    job = cs.rayjob_report(load("rayjob-initializing.json"))
    assert not job.terminal and job.line == "RayJob fsdp-finetune: deployment Initializing, job -"


def test_running_job():
    job = cs.rayjob_report(load("rayjob-running.json"))
    assert not job.terminal and job.job_status == "RUNNING"


def test_succeeded_job():
    job = cs.rayjob_report(load("rayjob-succeeded.json"))
    assert job.terminal and job.succeeded


def test_deadline_exceeded_names_the_setting():
    job = cs.rayjob_report(load("rayjob-deadline.json"))
    assert job.terminal and not job.succeeded
    assert "DeadlineExceeded: the job ran past training.active_deadline_seconds" in job.line


def test_app_failure_carries_the_first_line_of_the_message():
    job = cs.rayjob_report(load("rayjob-app-failed.json"))
    assert not job.succeeded and "2 failed attempt(s)" in job.line
    assert "AppFailed: the trainer exited with an error" in job.line
    assert "(Job entrypoint command failed with exit code 1, last available logs" in job.line


def test_submission_failure_points_at_the_submitter():
    job = cs.rayjob_report(load("rayjob-submission-failed.json"))
    assert "SubmissionFailed: the submitter pod could not submit the job" in job.line


def test_job_complete_with_a_failed_ray_job_is_not_a_success():
    rayjob = load("rayjob-succeeded.json")
    rayjob["status"]["jobStatus"] = "FAILED"
    job = cs.rayjob_report(rayjob)
    assert job.terminal and not job.succeeded and job.line.endswith("the Ray job ended FAILED")


def test_progress_from_a_real_trainer_log():
    """A real `python -m training.train --local` log: Ray's ANSI prefixes, lines duplicated by Ray's log
    forwarding, the human step lines and their machine-readable records."""
    progress = cs.trainer_progress((K8S / "trainer-local-run.log").read_text().splitlines())
    assert (progress.step, progress.steps) == (6, 6)
    assert progress.record["loss"] == pytest.approx(6.2431206703186035)
    assert progress.last_step.startswith("step 6/6 at 2026-11-30T10:54:26Z: loss 6.2431, 4,981 tokens/s per GPU, 51 ms/step")
    assert progress.summary["final_step"] == 6 and progress.summary["transport"] == "gloo (CPU): no NCCL"
    assert progress.errors == []


def test_the_trainers_record_round_trips_through_the_watcher():
    """What the trainer prints for a step (StepStats.record) is what the watcher reads back, exactly."""
    from training.metrics import StepStats

    stats = StepStats(time="2026-11-30T12:00:00Z", step=42, steps=200, loss=2.718281828, lr=1.5e-5, grad_norm=0.25,
                      tokens_per_s_per_gpu=4321.5, tflops_per_gpu=40.1, mfu=0.331, peak_mem_gib=17.25,
                      step_time_s=1.8958, eta_s=299.5)
    ray_prefix = "\x1b[36m(RayTrainWorker pid=311, ip=10.0.12.34)\x1b[0m "
    progress = cs.trainer_progress([ray_prefix + stats.line(), ray_prefix + stats.record()])
    assert progress.record == stats.fields()  # every figure, validation ones only where measured
    assert progress.last_step == "step 42/200 at 2026-11-30T12:00:00Z: loss 2.7183, 4,322 tokens/s per GPU, MFU 33.1%, 1896 ms/step"


def test_a_record_cut_short_is_ignored_and_the_previous_one_kept():
    from training.records import format_record

    whole = format_record({"step": 3, "steps": 9})
    progress = cs.trainer_progress([whole, whole.replace("3", "4")[:-5]])
    assert progress.record == {"step": 3, "steps": 9}


def test_transport_line_and_failure_in_a_gpu_log():
    lines = [
        "(RayTrainWorker pid=311, ip=10.0.12.34) NCCL transport: inter-node traffic NOT on EFA: socket in 3 of 3 multi-node communicators",
        "RuntimeError: --require-efa: inter-node traffic NOT on EFA: socket in 3 of 3 multi-node communicators",
    ]
    progress = cs.trainer_progress(lines)
    assert progress.transport.startswith("inter-node traffic NOT on EFA")
    summary = cs.final_summary(cs.rayjob_report(load("rayjob-app-failed.json")), progress, "ckpt-bucket")
    assert summary[0].startswith("FAILED: RayJob fsdp-finetune")
    assert summary[1] == "transport: inter-node traffic NOT on EFA: socket in 3 of 3 multi-node communicators"
    assert summary[-1] == "last error: RuntimeError: --require-efa: inter-node traffic NOT on EFA: socket in 3 of 3 multi-node communicators"
    assert "checkpoints: s3://ckpt-bucket/runs/" in summary


def test_success_summary_reports_throughput_and_where_things_are():
    progress = cs.trainer_progress([
        'run summary: {"run": "s3://ckpt/runs/fsdp-finetune", "wall_time_s": 2110.4, "final_loss": 2.31, '
        '"tokens_per_s_per_gpu": 2210.5, "mfu": 0.243, "checkpoint": "ckpt/runs/fsdp-finetune/checkpoint_2026-11-30"}',
        "NCCL transport: inter-node traffic on EFA in all 3 multi-node communicators"])
    summary = cs.final_summary(cs.rayjob_report(load("rayjob-succeeded.json")), progress, "ckpt")
    assert summary == [
        "SUCCEEDED: RayJob fsdp-finetune: deployment Complete, job SUCCEEDED",
        "transport: inter-node traffic on EFA in all 3 multi-node communicators",
        "throughput: 2,210 tokens/s per GPU, MFU 24.3%, final loss 2.31, 2110.4 s",
        "run summary: s3://ckpt/runs/fsdp-finetune/run_summary.json",
        "checkpoint: ckpt/runs/fsdp-finetune/checkpoint_2026-11-30",
    ]


@pytest.mark.parametrize("name", ["node-ready.json", "node-no-efa.json", "node-not-ready.json"])
def test_recorded_nodes_are_valid_kubernetes_objects(name):
    import kubernetes_validate

    kubernetes_validate.validate(load(name), "1.36", strict=True)


def test_eks_token_is_a_presigned_sts_url_bound_to_the_cluster():
    import base64
    import urllib.parse

    import boto3

    from tools.watch import eks_token

    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-2")
    token = eks_token(session, "my-cluster", "us-east-2")
    assert token.startswith("k8s-aws-v1.")
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert url.startswith("https://sts.us-east-2.amazonaws.com/?Action=GetCallerIdentity")
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0] and query["X-Amz-Expires"] == ["60"]


def test_watch_without_a_deployed_stack_is_one_line(monkeypatch, capsys):
    import boto3
    from botocore.stub import Stubber

    from tests.conftest import ROOT
    from tools import watch

    cloudformation = boto3.client("cloudformation", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(cloudformation)
    stub.add_client_error("describe_stacks", service_error_code="ValidationError",
                          service_message="Stack with id EksFsdpEfa does not exist")
    stub.activate()

    class Session:
        def client(self, name, region_name=None):
            assert name == "cloudformation"
            return cloudformation

    monkeypatch.setattr(boto3, "Session", Session)
    monkeypatch.chdir(ROOT)
    assert watch.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: stack EksFsdpEfa not found in us-east-2: run `make deploy` first") and "\n" not in err


# ------------------------------------------------------------------ what still bills when the watch ends


def test_billing_with_the_gpu_group_at_zero_is_the_idle_cluster():
    """EKS $0.10 + m7i.xlarge $0.2016 + NAT $0.045 = $0.3466/h (on-demand list prices)."""
    line = cs.still_billed([("system", "m7i.xlarge", 1), ("gpu-worker", "g6.12xlarge", 0)], nat_gateways=1)
    assert line == "still billed: control plane, system node, NAT: $0.35/h; make destroy to stop"


def test_billing_with_gpu_nodes_up_counts_them():
    """$0.3466 + 2 x $4.6016 = $9.5498/h."""
    line = cs.still_billed([("system", "m7i.xlarge", 1), ("gpu-worker", "g6.12xlarge", 2)], nat_gateways=1)
    assert line == "still billed: control plane, system node, 2 GPU nodes, NAT: $9.55/h; make destroy to stop"


def test_billing_counts_the_image_caches_interface_endpoints():
    """$0.3466 + the ecr.api and ecr.dkr endpoints in one AZ, 2 x $0.01 (AWS PrivateLink pricing) = $0.3666/h."""
    line = cs.still_billed([("system", "m7i.xlarge", 1), ("gpu-worker", "g6.12xlarge", 0)], nat_gateways=1,
                           interface_endpoint_azs=2)
    assert line == "still billed: control plane, system node, NAT, 2 interface endpoints: $0.37/h; make destroy to stop"


def test_the_watch_expects_the_endpoints_the_synthesized_stack_has(template):
    from stacks.settings import Settings
    from tools.review import interface_endpoint_azs

    assert Settings().interface_endpoint_azs == interface_endpoint_azs(template.to_json()) == 2
    assert Settings(image_pull_through_cache=False).interface_endpoint_azs == 0


def test_billing_names_types_without_a_price():
    line = cs.still_billed([("gpu-worker", "x9.mega", 1)], nat_gateways=2)
    assert line == ("still billed: control plane, GPU node (x9.mega, price unknown), 2 NAT gateways: $0.19/h plus the "
                    "unknown types; make destroy to stop")


@pytest.fixture
def moto_eks(monkeypatch):
    """moto's EKS with this stack's cluster and its two node groups: the GPU group scaled to zero."""
    import boto3
    from moto import mock_aws

    fake_aws_credentials(monkeypatch, region=None)
    with mock_aws():
        eks = boto3.client("eks", region_name="us-east-2")
        role = "arn:aws:iam::123456789012:role/node"
        eks.create_cluster(name="EksFsdpEfa", roleArn=role, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
        eks.create_nodegroup(clusterName="EksFsdpEfa", nodegroupName="system", nodeRole=role, subnets=["subnet-1"],
                             instanceTypes=["m7i.xlarge"], labels={"role": "system"},
                             scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1})
        eks.create_nodegroup(clusterName="EksFsdpEfa", nodegroupName="gpu", nodeRole=role, subnets=["subnet-1"],
                             instanceTypes=["g6.12xlarge"], labels={"role": "gpu-worker"},
                             scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": 0})
        yield eks


def test_the_watch_ends_with_the_idle_bill_when_the_gpu_group_is_at_zero(moto_eks):
    import boto3

    from stacks.settings import Settings
    from tools import watch

    _launch("system", "m7i.xlarge", 1)
    line = watch.billing_line(boto3.Session(), Settings(), "EksFsdpEfa")
    assert line == "still billed: control plane, system node, NAT, 2 interface endpoints: $0.37/h; make destroy to stop"


def _launch(group: str, instance_type: str, count: int, cluster: str = "EksFsdpEfa") -> None:
    """Instances as a managed node group's Auto Scaling group launches them, with EKS's tags."""
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=image, InstanceType=instance_type, MinCount=count, MaxCount=count, TagSpecifications=[{
        "ResourceType": "instance",
        "Tags": [{"Key": "eks:cluster-name", "Value": cluster}, {"Key": "eks:nodegroup-name", "Value": group}]}])


def test_the_watch_bills_gpu_nodes_the_autoscaler_has_started(moto_eks):
    import boto3

    from stacks.settings import Settings
    from tools import watch

    _launch("system", "m7i.xlarge", 1)
    _launch("gpu", "g6.12xlarge", 2)
    _launch("gpu", "g6.12xlarge", 1, cluster="OtherCluster")  # another cluster's group of the same name
    assert watch.billing_line(boto3.Session(), Settings(), "EksFsdpEfa").startswith(
        "still billed: control plane, system node, 2 GPU nodes, NAT, 2 interface endpoints: $9.57/h")


# ------------------------------------------------------------------ the job's life in events


def _event(reason: str, subject: str, message: str, at: str, uid: str = "u1") -> dict:
    return {"metadata": {"uid": uid}, "reason": reason, "message": message, "count": 1, "lastTimestamp": at,
            "involvedObject": {"kind": "Pod", "name": subject}}


def test_lifecycle_lines_follow_the_autoscaler_and_the_pulls_in_order():
    events = [
        _event("Pulled", "w-1", 'Successfully pulled image "ray:x" in 1m20s', "2026-11-30T10:09:00Z", "u3"),
        _event("TriggeredScaleUp", "w-1", "pod triggered scale-up: [{eks-gpu 0->2 (max: 2)}]", "2026-11-30T10:01:00Z", "u1"),
        _event("FailedScheduling", "w-1", "0/1 nodes are available", "2026-11-30T10:00:30Z", "u0"),
        _event("Pulling", "w-1", 'Pulling image "ray:x"', "2026-11-30T10:07:40Z", "u2"),
    ]
    seen: set = set()
    assert cs.lifecycle_lines(events, seen) == [
        "scale-up requested: w-1: pod triggered scale-up: [{eks-gpu 0->2 (max: 2)}]",
        'pulling image: w-1: Pulling image "ray:x"',
        'image pulled: w-1: Successfully pulled image "ray:x" in 1m20s']
    assert cs.lifecycle_lines(events, seen) == []  # each event once


def test_a_scale_up_in_backoff_says_what_that_means():
    """NotTriggerScaleUp with the AWS provider's back-off after a failed launch (skippedreasons.go BackoffReason)."""
    event = _event("NotTriggerScaleUp", "w-1", "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
                   "2026-11-30T10:05:00Z")
    [line] = cs.lifecycle_lines([event], set())
    assert line.startswith("no scale-up: w-1: pod didn't trigger scale-up: 1 in backoff after failed scale-up (the GPU "
                           "group's last launch failed (InsufficientInstanceCapacity or a quota)")


class _TeardownApi:
    """RayClusters of the job, then GPU nodes, as they go away poll after poll."""

    def __init__(self, clusters: list[int], nodes: list[int]):
        self.clusters, self.nodes = iter(clusters), iter(nodes)

    def list_namespaced_custom_object(self, *args, **kwargs):
        assert kwargs["label_selector"] == "ray.io/originated-from-cr-name=ft-1"
        return {"items": [{}] * next(self.clusters)}

    def list_node(self, label_selector):
        assert label_selector == "role=gpu-worker"
        return type("Nodes", (), {"items": [object()] * next(self.nodes)})()


def test_after_the_job_the_watch_sees_the_cluster_deleted_and_the_gpu_nodes_at_zero(monkeypatch, capsys):
    from kubernetes import client

    from stacks.settings import Settings
    from tools import watch

    api = _TeardownApi(clusters=[1, 0], nodes=[2, 0])
    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: api)
    monkeypatch.setattr(client, "CoreV1Api", lambda _: api)
    monkeypatch.setattr(watch, "_plain", lambda api_, obj: obj)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    watch.follow_teardown(None, Settings(), "training", "ft-1", poll_s=15, timeout_s=3600)
    out = [line.split(" ", 1)[1] for line in capsys.readouterr().out.strip().splitlines()]
    assert out == ["RayCluster of ft-1 deleted", "GPU nodes at zero"]


def _stubbed_session(monkeypatch, outputs: dict, eks_error: str):
    import boto3
    from botocore.stub import Stubber

    cloudformation = boto3.client("cloudformation", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    eks = boto3.client("eks", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    stubs = [Stubber(cloudformation), Stubber(eks)]
    stubs[0].add_response("describe_stacks", {"Stacks": [{
        "StackName": "EksFsdpEfa", "CreationTime": "2026-11-30T00:00:00Z", "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]}]})
    stubs[1].add_client_error("describe_cluster", service_error_code=eks_error, service_message="denied")
    stubs[1].add_client_error("list_nodegroups", service_error_code=eks_error, service_message="denied")
    for stub in stubs:
        stub.activate()

    class Session:
        def client(self, name, region_name=None):
            return {"cloudformation": cloudformation, "eks": eks}[name]

    monkeypatch.setattr(boto3, "Session", Session)


def test_watch_that_fails_after_deploy_still_ends_with_what_bills(monkeypatch, capsys):
    from tests.conftest import ROOT
    from tools import watch

    _stubbed_session(monkeypatch, {"ClusterName": "EksFsdpEfa", "Namespace": "training", "RayJobName": "ft-1"},
                     "AccessDeniedException")
    monkeypatch.chdir(ROOT)
    assert watch.main([]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: An error occurred (AccessDeniedException)")
    out = captured.out.strip().splitlines()
    assert out[0].startswith("(node groups unreadable: An error occurred (AccessDeniedException)")
    assert out[1] == ("still billed: control plane, system node, 2 GPU nodes, NAT, 2 interface endpoints: $9.57/h; "
                      "make destroy to stop")


@pytest.mark.parametrize("flag,value", [("--poll", "0"), ("--teardown-timeout", "-5"), ("--poll", "soon")])
def test_watch_refuses_intervals_that_are_not_positive(monkeypatch, capsys, flag, value):
    from tests.conftest import ROOT
    from tools import watch

    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        watch.main([flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: argument {flag}:") and "\n" not in err


@pytest.mark.parametrize("argv", [["--node-timeout", "-5"], ["--node-timeout=-5"]], ids=["space", "equals"])
@pytest.mark.parametrize("tool", ["watch", "preflight", "deploy", "teardown"])
def test_an_option_no_tool_takes_is_refused_in_one_line_before_anything_starts(monkeypatch, capsys, tool, argv):
    # --node-timeout was watch's until the watch learned to follow the nodes itself; a rerun with it was ignored.
    import importlib

    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("boto3.Session", lambda *a, **k: pytest.fail("AWS was called: the refusal came too late"))
    assert importlib.import_module(f"tools.{tool}").main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: unrecognized option --node-timeout: python -m tools.{tool} takes -c, --context, ")
    assert err.count("\n") == 1


def test_cdks_own_flags_in_cdk_args_are_kept_for_cdk():
    # make passes CDK_ARGS to every tool: flags of cdk's commands (its own declaration, aws-cdk's
    # cli-type-registry.json) pass; one of no command is refused.
    from tests.conftest import ROOT
    from tools.cli import parse, tool_parser

    cdk_json = str(ROOT / "cdk.json")
    flags = ["--require-approval", "never", "--profile=dev", "-v", "--no-rollback", "--hotswap"]
    args, rest, settings = parse(tool_parser("python -m tools.watch", "Watch."), ["--cdk-json", cdk_json, *flags])
    assert settings is not None and rest == flags
    assert parse(tool_parser("python -m tools.watch", "Watch."), ["--cdk-json", cdk_json, "--hotswop"])[2] is None


# ------------------------------------------------------------------ every terminal state, and giving up in time


@pytest.mark.parametrize("deployment,reason,hint", [
    ("Complete", None, None),
    ("Failed", "AppFailed", "the trainer exited with an error"),
    ("Failed", "DeadlineExceeded", "training.active_deadline_seconds"),
    ("Failed", "PreRunningDeadlineExceeded", "not running within training.pre_running_deadline_seconds"),
    ("ValidationFailed", "ValidationFailed", "KubeRay rejected the RayJob spec"),
    ("Suspended", None, "nothing runs until it is resumed"),
])
def test_every_terminal_state_ends_the_watch_with_its_hint(deployment, reason, hint):
    rayjob = load("rayjob-running.json")
    rayjob["status"] |= {"jobDeploymentStatus": deployment, **({"reason": reason} if reason else {})}
    job = cs.rayjob_report(rayjob)
    assert job.terminal
    if hint:
        assert hint in job.line


@pytest.mark.parametrize("deployment", ["New", "Initializing", "Running", "Waiting", "Retrying", "Suspending"])
def test_states_that_go_on_do_not_end_the_watch(deployment):
    rayjob = load("rayjob-running.json")
    rayjob["status"]["jobDeploymentStatus"] = deployment
    assert not cs.rayjob_report(rayjob).terminal


def test_an_unknown_reason_points_at_the_events():
    rayjob = load("rayjob-app-failed.json")
    rayjob["status"]["reason"] = "SomethingNew"
    assert "SomethingNew: see the RayJob events" in cs.rayjob_report(rayjob).line


def test_a_node_without_a_ready_condition_says_so():
    node = load("node-ready.json")
    node["status"]["conditions"] = []
    assert cs.node_report(node, 4, 1).missing == ["not Ready (no Ready condition yet)"]


@pytest.mark.parametrize("name", sorted(p.name for p in K8S.glob("rayjob-*.json")))
def test_recorded_rayjobs_pass_kuberays_own_rules(name):
    """Fixtures are only worth as much as their truth: each is a RayJob KubeRay's controller accepts."""
    from cdk_constructs.kuberay_rules import ray_job_violations

    assert ray_job_violations(load(name)) == []


class _FakeApi:
    """The two Kubernetes API groups the watcher reads, answering from a script of RayJob states."""

    def __init__(self, states: list[str]):
        self.states = iter(states)

    def get_namespaced_custom_object(self, *args):
        rayjob = load("rayjob-running.json")
        rayjob["status"]["jobDeploymentStatus"] = next(self.states)
        return rayjob

    def list_namespaced_pod(self, *args, **kwargs):
        return type("PodList", (), {"items": []})()


def _follow(monkeypatch, states, timeout_s, clock):
    from kubernetes import client

    from tools import watch

    api = _FakeApi(states)
    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: api)
    monkeypatch.setattr(client, "CoreV1Api", lambda _: api)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    monkeypatch.setattr(watch.time, "monotonic", lambda: next(clock))
    return watch.follow_job(None, "training", "ft-1", "bucket", poll_s=15, timeout_s=timeout_s)


def test_the_watch_stops_at_validation_failed_instead_of_looping(monkeypatch, capsys):
    assert _follow(monkeypatch, ["Running", "Running", "ValidationFailed"], 3600, iter(range(0, 100, 10))) is False
    out = capsys.readouterr().out
    assert "FAILED: RayJob fsdp-finetune: deployment ValidationFailed" in out


def test_the_watch_gives_up_after_its_timeout(monkeypatch, capsys):
    clock = iter([0, 1000, 2000, 4000])
    assert _follow(monkeypatch, ["Running"] * 10, 3600, clock) is False
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("STOPPED WATCHING after 3600 s: RayJob fsdp-finetune: deployment Running")
    assert "the job goes on" in out[-1]


# ------------------------------------------------------------------ exact lines


def test_node_types_default_to_unknown():
    nodes = [{}, {"metadata": {}}, {"metadata": {"labels": None}},
             {"metadata": {"labels": {"node.kubernetes.io/instance-type": "g6.12xlarge"}}}]
    assert cs.node_instance_types(nodes) == ["unknown", "unknown", "unknown", "g6.12xlarge"]


NAMED = {"metadata": {"name": "ft-1"}}


@pytest.mark.parametrize("status,report", [
    (None, ("New", "-", False, False, "RayJob ft-1: deployment New, job -")),
    ({"jobDeploymentStatus": "Running", "message": "starting"}, ("Running", "-", False, False, "RayJob ft-1: deployment Running, job -")),
    ({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "DeadlineExceeded", "message": "  ran past\nmore"},
     ("Failed", "FAILED", True, False, "RayJob ft-1: deployment Failed, job FAILED; DeadlineExceeded: the job ran past "
                                       "training.active_deadline_seconds (ran past)")),
    ({"jobDeploymentStatus": "Failed", "message": "y" * 300},
     ("Failed", "-", True, False, "RayJob ft-1: deployment Failed, job - (" + "y" * 200 + ")")),
    ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"},
     ("Complete", "SUCCEEDED", True, True, "RayJob ft-1: deployment Complete, job SUCCEEDED")),
    ({"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"},
     ("Complete", "FAILED", True, False, "RayJob ft-1: deployment Complete, job FAILED; the Ray job ended FAILED")),
    ({"jobDeploymentStatus": "Suspended"}, ("Suspended", "-", True, False, "RayJob ft-1: deployment Suspended, job -; the "
                                            "RayJob is suspended (spec.suspend): nothing runs until it is resumed")),
])
def test_rayjob_reports_in_full(status, report):
    job = cs.rayjob_report(NAMED | ({"status": status} if status else {}))
    assert (job.deployment, job.job_status, job.terminal, job.succeeded, job.line) == report


def test_final_summaries_in_full():
    failed = cs.rayjob_report(NAMED | {"status": {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"}})
    progress = cs.trainer_progress(["\x1b[36m(pid=1)\x1b[0m   RuntimeError: boom " + "y" * 400 + "   "])
    assert progress.errors == ["RuntimeError: boom " + "y" * 281]
    assert cs.final_summary(failed, progress, "bkt") == [
        "FAILED: RayJob ft-1: deployment Failed, job FAILED", "transport: no NCCL transport line in the log",
        "checkpoints: s3://bkt/runs/", "last error: RuntimeError: boom " + "y" * 281]
    done = cs.rayjob_report(NAMED | {"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}})
    summary = {"tokens_per_s_per_gpu": 1234.5, "mfu": 0.3, "final_loss": 2.5, "wall_time_s": 60, "run": "s3://b/runs/r",
               "checkpoint": "s3://b/runs/r/checkpoint_1"}
    assert cs.final_summary(done, cs.TrainerProgress(summary=summary, transport="EFA"), None) == [
        "SUCCEEDED: RayJob ft-1: deployment Complete, job SUCCEEDED", "transport: EFA",
        "throughput: 1,234 tokens/s per GPU, MFU 30.0%, final loss 2.5, 60 s", "run summary: s3://b/runs/r/run_summary.json",
        "checkpoint: s3://b/runs/r/checkpoint_1"]
    assert cs.final_summary(failed, cs.TrainerProgress(summary={"tokens_per_s_per_gpu": 10.0}), None)[2] == (
        "throughput: 10 tokens/s per GPU, final loss None, None s")


def test_a_timed_out_watch_says_the_job_goes_on():
    job = cs.rayjob_report(NAMED | {"status": {"jobDeploymentStatus": "Running"}})
    assert cs.timed_out_line(job, cs.TrainerProgress(), 90) == (
        "STOPPED WATCHING after 90 s: RayJob ft-1: deployment Running, job -; the job goes on "
        "(make watch follows it again; make destroy stops it and the billing)")


@pytest.mark.parametrize("value,count", [(None, 0), ("4", 4), (4, 4), ("4Gi", 0), ("", 0)])
def test_quantity_counts_devices_and_nothing_else(value, count):
    assert cs.quantity(value) == count


def test_a_node_without_status_is_not_ready_and_has_nothing():
    assert cs.node_report({"metadata": {"name": "n"}}, 4, 1) == cs.NodeReport("n", False, 0, 0, [
        "not Ready (no Ready condition yet)",
        "nvidia.com/gpu 0 of 4 allocatable: the NVIDIA device plugin has no pod on this node (taint toleration, "
        "node selector or allowlist?)",
        "vpc.amazonaws.com/efa 0 of 1 allocatable: the EFA device plugin has no pod on this node (taint toleration, "
        "node selector or allowlist?)"])


def test_error_lines_lose_colour_codes_and_trailing_blanks():
    assert cs.trainer_progress(["RuntimeError: \x1b[31mboom\x1b[0m   "]).errors == ["RuntimeError: boom"]


STEP_RECORD = {"time": "2026-11-30T10:00:00Z", "step": 7, "steps": 10, "loss": 2.0, "tokens_per_s_per_gpu": 100.0,
               "mfu": None, "step_time_s": 0.5}
LAST_STEP = "step 7/10 at 2026-11-30T10:00:00Z: loss 2.0000, 100 tokens/s per GPU, 500 ms/step"


def test_a_timed_out_watch_says_where_the_trainer_was():
    job = cs.rayjob_report(NAMED | {"status": {"jobDeploymentStatus": "Running"}})
    assert cs.timed_out_line(job, cs.TrainerProgress(record=STEP_RECORD), 90) == (
        f"STOPPED WATCHING after 90 s: RayJob ft-1: deployment Running, job -, at {LAST_STEP}; the job goes on "
        "(make watch follows it again; make destroy stops it and the billing)")


def test_a_summary_without_throughput_gives_the_last_step():
    job = cs.rayjob_report(NAMED | {"status": {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"}})
    assert cs.final_summary(job, cs.TrainerProgress(record=STEP_RECORD), None) == [
        "FAILED: RayJob ft-1: deployment Failed, job FAILED", "transport: no NCCL transport line in the log",
        f"last step: {LAST_STEP}"]


def test_teardown_that_takes_too_long_says_what_it_waits_for(monkeypatch, capsys):
    from kubernetes import client

    from stacks.settings import Settings
    from tools import watch

    api = _TeardownApi(clusters=[1] * 5, nodes=[])
    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: api)
    monkeypatch.setattr(client, "CoreV1Api", lambda _: api)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    clock = iter([0, 10, 700, 1000])
    monkeypatch.setattr(watch.time, "monotonic", lambda: next(clock))
    watch.follow_teardown(None, Settings(), "training", "ft-1", poll_s=15, timeout_s=900)
    assert capsys.readouterr().out.strip() == ("still waiting after 900 s for KubeRay to delete the cluster; "
                                               "make watch looks again")


def test_with_fixed_gpu_nodes_the_watch_does_not_wait_for_them(monkeypatch, capsys):
    from kubernetes import client

    from stacks.settings import Settings
    from tools import watch

    api = _TeardownApi(clusters=[0], nodes=[])  # a node count asked for would raise StopIteration
    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: api)
    monkeypatch.setattr(client, "CoreV1Api", lambda _: api)
    watch.follow_teardown(None, Settings(gpu_scale_to_zero=False), "training", "ft-1", poll_s=15, timeout_s=900)
    out = [line.split(" ", 1)[1] if line[:2].isdigit() else line for line in capsys.readouterr().out.strip().splitlines()]
    assert out == ["RayCluster of ft-1 deleted", "GPU nodes stay up (gpu_scale_to_zero is false)"]


class _ProgressApi:
    """Events, kube-system pods and GPU nodes as the Kubernetes API lists them, poll after poll."""

    def __init__(self, events: list[list[dict]], nodes: list[list[dict]]):
        self.events, self.nodes = iter(events), iter(nodes)

    def list_namespaced_event(self, namespace):
        return type("Events", (), {"items": next(self.events) if namespace == "training" else []})()

    def list_namespaced_pod(self, namespace):
        return {"items": []}

    def list_node(self, label_selector):
        return type("Nodes", (), {"items": next(self.nodes)})()


def test_the_progress_lines_tell_the_scale_up_then_the_nodes_once(monkeypatch):
    from kubernetes import client

    from stacks.settings import Settings
    from tools import watch

    scale_up = _event("TriggeredScaleUp", "w-1", "pod triggered scale-up: [{gpu 0->2 (max: 2)}]", "2026-11-30T10:01:00Z")
    ready = load("node-ready.json")
    api = _ProgressApi(events=[[scale_up], [scale_up], [scale_up]], nodes=[[], [ready, ready], [ready, ready]])
    monkeypatch.setattr(client, "CoreV1Api", lambda _: api)
    monkeypatch.setattr(watch, "_plain", lambda api_, obj: obj)
    report = watch.progress_reporter(None, Settings(), "training")
    assert report() == ["scale-up requested: w-1: pod triggered scale-up: [{gpu 0->2 (max: 2)}]",
                        "0 of 2 GPU nodes have joined the cluster"]
    name = ready["metadata"]["name"]
    assert report() == [f"all 2 GPU node(s) ready: {name} (4 GPU, 1 EFA), {name} (4 GPU, 1 EFA)"]
    assert report() == []


# ------------------------------------------------------------------ what Kubernetes and EKS really report


def test_a_gpu_the_kubelet_stopped_offering_is_missing_though_the_node_still_has_it():
    """The kubelet's device manager counts every registered device in capacity and only the healthy ones in
    allocatable (pkg/kubelet/cm/devicemanager GetCapacity; test/e2e_node/device_plugin_failures_test.go):
    after an XID error the node has 4 GPUs and offers 3, so a 4-GPU worker pod cannot be placed."""
    import copy

    node = copy.deepcopy(load("node-ready.json"))
    node["status"]["capacity"]["nvidia.com/gpu"] = "4"
    node["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    report = cs.node_report(node, 4, 1, plugin_pods_on_node=["nvidia-device-plugin-x2k9d"])
    assert (report.gpus, report.ok) == (3, False)
    assert report.missing == ["nvidia.com/gpu 3 of 4 allocatable: its plugin pod runs but has not registered them yet"]


class _WatchSession:
    def client(self, service, **_):
        import types

        return types.SimpleNamespace(describe_cluster=lambda name: {"cluster": {
            "endpoint": "https://example.eks.amazonaws.com", "certificateAuthority": {"data": "Y2E="}}})


def test_the_watcher_signs_a_new_eks_token_before_the_old_one_expires(monkeypatch):
    """EKS accepts a token for 15 minutes (aws-iam-authenticator; `aws eks get-token` says the same). A
    watch follows a job for hours: over 3 hours, polled every 30 s, no token may be used 15 minutes after
    it was signed, and tokens are not re-signed on every poll either."""
    from tools import watch

    now = {"t": 1000.0}
    signed_at = []
    monkeypatch.setattr(watch.time, "monotonic", lambda: now["t"])
    monkeypatch.setattr(watch, "eks_token", lambda session, name, region: signed_at.append(now["t"]) or f"token-{now['t']}")
    api = watch.kubernetes_api(_WatchSession(), "my-cluster", "us-east-2")
    configuration = api.configuration
    used = []
    for poll in range(3 * 3600 // 30):
        now["t"] = 1000.0 + 30 * poll
        configuration.refresh_api_key_hook(configuration)
        used.append((now["t"], float(configuration.api_key["authorization"].removeprefix("token-"))))
    assert max(t - signed for t, signed in used) < 15 * 60
    assert 3 * 3600 / (15 * 60) <= len(signed_at) <= 3 * 3600 / (5 * 60)
    assert configuration.api_key_prefix["authorization"] == "Bearer"


def test_a_pre_running_deadline_is_explained_in_one_line():
    """KubeRay v1.7.0's reason and message for it (rayjob_controller.go checkPreRunningDeadlineAndUpdateStatusIfNeeded)."""
    rayjob = load("rayjob-running.json")
    rayjob["status"] |= {"jobDeploymentStatus": "Failed", "reason": "PreRunningDeadlineExceeded",
                         "message": "The RayJob has passed the preRunningDeadlineSeconds. StartTime: 2026-12-05 "
                                    "23:00:00 +0000 UTC. PreRunningDeadlineSeconds: 1200"}
    line = cs.rayjob_report(rayjob).line
    assert "\n" not in line
    assert "partner was refused capacity" in line and "training.backoff_limit" in line


def test_the_progress_lines_read_the_autoscalers_own_events_in_kube_system(monkeypatch):
    """Cluster Autoscaler records a group's scale-up and its failures (core/scaleup/orchestrator/executor.go,
    LogRecorder) on its status ConfigMap in kube-system, not on the job's pods: a watch reading only the job's
    namespace would never say that the GPU group failed to launch."""
    from kubernetes import client

    from stacks.settings import Settings
    from tools import watch

    failed = _event("FailedToScaleUpGroup", "cluster-autoscaler-status", "Scale-up failed for group eks-gpu: "
                    "InsufficientInstanceCapacity", "2026-11-30T10:03:00Z")
    failed["involvedObject"]["kind"] = "ConfigMap"

    class Api(_ProgressApi):
        def list_namespaced_event(self, namespace):
            return type("Events", (), {"items": [failed] if namespace == "kube-system" else []})()

    monkeypatch.setattr(client, "CoreV1Api", lambda _: Api(events=[], nodes=[[]]))
    monkeypatch.setattr(watch, "_plain", lambda api_, obj: obj)
    assert watch.progress_reporter(None, Settings(), "training")()[0] == (
        "scale-up failed: cluster-autoscaler-status: Scale-up failed for group eks-gpu: InsufficientInstanceCapacity")
