"""Follow a deployed stack to a verified training run: `python -m tools.watch [-c key=value ...]`.

1. Reads the stack's outputs (cluster, namespace, RayJob, bucket) from CloudFormation.
2. Talks to the EKS API with a token signed from the caller's AWS credentials (no kubectl or
   aws CLI needed; the caller needs an access entry: the admin_principal_arn setting).
3. Follows the RayJob through its life: its status changes; Cluster Autoscaler's scale-up for the
   pending workers, or why there is none (its events: no capacity shows as a back-off); the GPU
   nodes until each advertises the GPUs and EFA devices its worker requests; the image pulls; the
   trainer's step lines; then a summary: result, NCCL transport verdict, tokens/s, where the
   checkpoints are, and the run's report (tools.report).
4. After the job: KubeRay deleting its RayCluster (after ttl_seconds_after_finished), and the GPU
   nodes going back to zero (after the scale-down delay).
5. Ends, whatever happened, with what still bills: the node groups (EKS API) and their running instances (EC2).
Exit status: 0 when the job succeeded, 1 when it failed, 2 on errors.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from cdk_constructs.instance_types import INSTANCE_TYPES
from stacks.settings import Settings
from tools.cli import parse, tool_parser
from tools import cluster_status as cs
from tools import bill
from tools.bill import NodeRecorder
from training.records import RECORD_PREFIX
from training.watchdog import LINE_PREFIX as HANG_LINE, dump_folders

TOKEN_LIFETIME_S = 14 * 60  # EKS tokens live 15 minutes; sign a new one before that
RAYJOB = ("ray.io", "v1", "rayjobs")


class WatchError(RuntimeError):
    """Something stops the watch before a verdict; the message is one line."""


def stack_outputs(session, s: Settings) -> dict[str, str]:
    cloudformation = session.client("cloudformation", region_name=s.region)
    try:
        stack = cloudformation.describe_stacks(StackName=s.stack_name)["Stacks"][0]
    except cloudformation.exceptions.ClientError as error:
        raise WatchError(f"stack {s.stack_name} not found in {s.region}: run `make deploy` first ({error})") from None
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def eks_token(session, cluster_name: str, region: str) -> str:
    """A bearer token for the EKS API: a presigned STS GetCallerIdentity URL bound to the cluster name."""
    from botocore.signers import RequestSigner

    sts = session.client("sts", region_name=region)
    signer = RequestSigner(sts.meta.service_model.service_id, region, "sts", "v4",
                           session.get_credentials(), sts.meta.events)
    url = signer.generate_presigned_url(
        {"method": "GET", "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
         "body": {}, "headers": {"x-k8s-aws-id": cluster_name}, "context": {}},
        region_name=region, expires_in=60, operation_name="")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def kubernetes_api(session, cluster_name: str, region: str):
    from kubernetes import client

    cluster = session.client("eks", region_name=region).describe_cluster(name=cluster_name)["cluster"]
    ca_file = tempfile.NamedTemporaryFile(prefix="eks-ca-", suffix=".crt", delete=False)
    ca_file.write(base64.b64decode(cluster["certificateAuthority"]["data"]))
    ca_file.close()
    configuration = client.Configuration()
    configuration.host = cluster["endpoint"]
    configuration.ssl_ca_cert = ca_file.name
    signed = {"at": 0.0}

    def refresh(config) -> None:
        if time.monotonic() - signed["at"] > TOKEN_LIFETIME_S:
            config.api_key["authorization"] = eks_token(session, cluster_name, region)
            config.api_key_prefix["authorization"] = "Bearer"
            signed["at"] = time.monotonic()

    configuration.refresh_api_key_hook = refresh
    refresh(configuration)
    return client.ApiClient(configuration)


def _plain(api, obj) -> dict:
    return api.sanitize_for_serialization(obj)


RAYCLUSTER = ("ray.io", "v1", "rayclusters")
# KubeRay labels the RayCluster it makes for a RayJob with the job's name (rayjob_controller.go
# constructRayClusterForRayJob, utils.RayOriginatedFromCRNameLabelKey).
ORIGINATED_FROM = "ray.io/originated-from-cr-name"


def gpu_nodes(api) -> list[dict]:
    from kubernetes import client

    from cdk_constructs.node_groups import GPU_NODE_LABELS

    selector = f"role={GPU_NODE_LABELS['role']}"
    return [_plain(api, n) for n in client.CoreV1Api(api).list_node(label_selector=selector).items]


def record_nodes(api, namespace: str, recorder: NodeRecorder | None) -> list[dict]:
    """The GPU nodes now; with a recorder, their and the job's pods' timestamps kept for the measured bill (tools.bill)."""
    from kubernetes import client

    nodes = gpu_nodes(api)
    if recorder is None:
        return nodes
    pods = _plain(api, client.CoreV1Api(api).list_namespaced_pod(namespace))["items"]
    recorder.observe(nodes, pods, datetime.now(timezone.utc))
    return nodes


def progress_reporter(api, s: Settings, namespace: str, recorder: NodeRecorder | None = None, pending_check=None):
    """A function that returns the new lines of the job's life since its last call: autoscaler and
    image-pull events, and the GPU nodes' readiness (GPUs and EFA devices allocatable). Each call
    also records the nodes for the measured bill, and `pending_check()` notes instances still pending."""
    from kubernetes import client

    core, spec, seen, last = client.CoreV1Api(api), INSTANCE_TYPES[s.gpu_instance_type], set(), {"nodes": None}

    def report() -> list[str]:
        events = [_plain(api, e) for ns in (namespace, "kube-system") for e in core.list_namespaced_event(ns).items]
        lines = cs.lifecycle_lines(events, seen)
        pods = _plain(api, core.list_namespaced_pod("kube-system"))["items"]
        on_node: dict = {}
        for pod in pods:
            on_node.setdefault(pod.get("spec", {}).get("nodeName"), []).append(pod["metadata"]["name"])
        nodes = record_nodes(api, namespace, recorder)
        if pending_check:
            pending_check()
        reports = [cs.node_report(n, spec.gpus, spec.efa_interfaces, on_node.get(n["metadata"]["name"], [])) for n in nodes]
        ready, problems = cs.nodes_verdict(reports, s.gpu_node_count)
        state = ("ready", tuple(r.name for r in reports)) if ready else tuple(problems)
        if state != last["nodes"]:
            last["nodes"] = state
            lines += ([f"all {len(reports)} GPU node(s) ready: " + ", ".join(f"{r.name} ({r.gpus} GPU, {r.efa} EFA)"
                                                                       for r in reports)] if ready else problems)
        return lines

    return report


def job_is_over(api, namespace: str, job_name: str) -> bool:
    from kubernetes import client

    rayjob = client.CustomObjectsApi(api).get_namespaced_custom_object(*RAYJOB[:2], namespace, RAYJOB[2], job_name)
    return cs.rayjob_report(rayjob).terminal


def follow_teardown(api, s: Settings, namespace: str, job_name: str, poll_s: int, timeout_s: int,
                    recorder: NodeRecorder | None = None) -> None:
    """After the job: its RayCluster deleted by KubeRay, then the GPU nodes removed by the autoscaler."""
    from kubernetes import client

    custom, started, cluster_gone = client.CustomObjectsApi(api), time.monotonic(), False
    while time.monotonic() - started < timeout_s:
        if not cluster_gone:
            clusters = custom.list_namespaced_custom_object(*RAYCLUSTER[:2], namespace, RAYCLUSTER[2],
                                                            label_selector=f"{ORIGINATED_FROM}={job_name}")["items"]
            if not clusters:
                cluster_gone = True
                print(time.strftime("%H:%M:%S ") + f"RayCluster of {job_name} deleted", flush=True)
                if not s.gpu_scale_to_zero:
                    print("GPU nodes stay up (gpu_scale_to_zero is false)", flush=True)
                    return
        # With a recorder every poll reads the nodes: the TTL's end shows as the pods' deletion.
        nodes = record_nodes(api, namespace, recorder) if recorder or cluster_gone else None
        if cluster_gone and not nodes:
            print(time.strftime("%H:%M:%S ") + "GPU nodes at zero", flush=True)
            return
        time.sleep(poll_s)
    print(f"still waiting after {timeout_s} s for {'the GPU nodes to go' if cluster_gone else 'KubeRay to delete the cluster'}; "
          "make watch looks again", flush=True)


def teardown_wait_seconds(s: Settings) -> int:
    """How long to follow the teardown by default: KubeRay deletes the RayCluster ttl_seconds_after_finished
    after the job, the autoscaler removes an idle node after its scale-down delay (minutes), plus 10 minutes."""
    return s.training.ttl_seconds_after_finished + 60 * s.gpu_scale_down_delay_minutes + 600


def node_groups(session, cluster_name: str, region: str) -> list[tuple[str, str, int]]:
    """(role label, instance type, instances running) of each node group of the cluster: the groups from
    the EKS API, their instances from EC2 by the tags EKS puts on them (eks:cluster-name, eks:nodegroup-name),
    which is what bills, whatever size the autoscaler last asked for."""
    eks = session.client("eks", region_name=region)
    names = eks.list_nodegroups(clusterName=cluster_name)["nodegroups"]
    ec2, groups = session.client("ec2", region_name=region), []
    for name in names:
        group = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=name)["nodegroup"]
        filters = [{"Name": "tag:eks:cluster-name", "Values": [cluster_name]},
                   {"Name": "tag:eks:nodegroup-name", "Values": [name]},
                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
        running = sum(len(r["Instances"]) for page in pages for r in page["Reservations"])
        groups.append(((group.get("labels") or {}).get("role", name), (group.get("instanceTypes") or ["unknown"])[0],
                       running))
    return groups


def billing_line(session, s: Settings, cluster_name: str) -> str:
    """What still bills: the node groups' sizes as EKS reports them, else what the settings deploy."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        groups = node_groups(session, cluster_name, s.region)
    except (BotoCoreError, ClientError) as error:
        groups = [("system", s.system_instance_type, s.system_node_count),
                  ("gpu-worker", s.gpu_instance_type, s.gpu_node_count)]
        print(f"(node groups unreadable: {str(error).splitlines()[0][:120]}; assuming the GPU nodes run)", flush=True)
    return cs.still_billed(groups, s.nat_gateways, s.interface_endpoint_azs)


def follow_job(api, namespace: str, job_name: str, bucket: str | None, poll_s: int, timeout_s: int,
               progress=None, finished: dict | None = None) -> bool:
    """Follow the RayJob until a terminal state (True when it succeeded) or until timeout_s have passed;
    `progress` (progress_reporter) adds the lines of what happens around it. `finished` gets the job's end
    time and run folder."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    last_line, printed = None, 0
    log_lines: list[str] = []
    started = time.monotonic()
    while True:
        try:
            rayjob = custom.get_namespaced_custom_object(*RAYJOB[:2], namespace, RAYJOB[2], job_name)
        except ApiException as error:
            if error.status == 404:
                raise WatchError(f"RayJob {namespace}/{job_name} does not exist (deleted, or a different stack?)") from None
            raise
        job = cs.rayjob_report(rayjob)
        if job.line != last_line:
            print(time.strftime("%H:%M:%S ") + job.line, flush=True)
            last_line = job.line
        for line in progress() if progress and not job.terminal else []:
            print(time.strftime("%H:%M:%S ") + line, flush=True)
        submitters = core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items
        if submitters:
            newest = max(submitters, key=lambda p: p.metadata.creation_timestamp)
            try:
                log_lines = core.read_namespaced_pod_log(newest.metadata.name, namespace).splitlines()
            except ApiException:
                pass  # container not started yet
            for line in log_lines[printed:]:
                if RECORD_PREFIX in line:
                    continue  # the machine-readable twin of the step line above it
                if any(mark in line for mark in ("step ", "NCCL transport", "run summary", "Error", "health gate", HANG_LINE)):
                    print("  " + line.strip()[:300], flush=True)
            printed = len(log_lines)
        if job.terminal:
            progress = cs.trainer_progress(log_lines)
            if finished is not None:
                finished |= {"end": (rayjob.get("status") or {}).get("endTime"), "run": (progress.summary or {}).get("run")}
            print("\n".join(cs.final_summary(job, progress, bucket)))
            for folder in dump_folders(log_lines):
                print(f"hang dumps: {folder}/ (every rank's Python stacks and NCCL flight recorder)", flush=True)
            print_report((progress.summary or {}).get("run"))
            return job.succeeded
        if time.monotonic() - started >= timeout_s:
            print(cs.timed_out_line(job, cs.trainer_progress(log_lines), timeout_s), flush=True)
            return False
        time.sleep(poll_s)


def print_report(run: str | None) -> None:
    """The run's picture and text summary (tools.report), from its metrics in the bucket."""
    if not run:
        return
    from tools.report import ReportError, report

    try:
        print("\n".join(report(run)), flush=True)
    except ReportError as error:
        print(f"no report: {error}", flush=True)


def positive_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be a positive number of seconds")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser("python -m tools.watch", __doc__)
    parser.add_argument("--teardown-timeout", type=positive_int, default=None,
                        help="seconds to follow the cluster's deletion and the GPU nodes' removal after the job "
                             "(default: the TTL plus the scale-down delay plus 10 minutes)")
    parser.add_argument("--poll", type=positive_int, default=15, help="seconds between polls")
    parser.add_argument("--job-timeout", type=positive_int, default=None,
                        help="seconds to follow the job before giving up (default: its deadline plus 30 minutes)")
    args, _, s = parse(parser, argv)
    if s is None:
        return 2
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    from kubernetes.client.rest import ApiException

    session, api, outputs = boto3.Session(), None, None
    code, recorder, pending, finished = 2, NodeRecorder(), {}, {}
    try:
        outputs = stack_outputs(session, s)
        api = kubernetes_api(session, outputs["ClusterName"], s.region)
        namespace, job = outputs["Namespace"], outputs["RayJobName"]
        print(f"job {namespace}/{job}: GPU nodes start when its workers wait for them", flush=True)
        timeout = args.job_timeout or s.training.active_deadline_seconds + 1800
        ec2 = session.client("ec2", region_name=s.region)

        def pending_check() -> None:
            bill.pending_sightings(ec2, outputs["ClusterName"], pending, datetime.now(timezone.utc))

        succeeded = follow_job(api, namespace, job, outputs.get("CheckpointBucket"), args.poll, timeout,
                               progress_reporter(api, s, namespace, recorder, pending_check), finished)
        code = 0 if succeeded else 1
        if job_is_over(api, namespace, job):
            after = args.teardown_timeout or teardown_wait_seconds(s)
            follow_teardown(api, s, namespace, job, args.poll, after, recorder)
    except NoCredentialsError:
        print("error: no AWS credentials found; run `aws configure` or `aws sso login` first", file=sys.stderr)
    except KeyError as missing:
        print(f"error: the stack has no output {missing}; deploy this version of the app first", file=sys.stderr)
    except ApiException as error:
        if error.status in (401, 403):
            print(f"error: the EKS API refused these credentials ({error.status}); give your role cluster access with "
                  "-c admin_principal_arn=<its ARN> and deploy again", file=sys.stderr)
        else:
            print(f"error: Kubernetes API: {error.status} {error.reason}", file=sys.stderr)
    except (WatchError, ClientError, BotoCoreError) as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
    except KeyboardInterrupt:
        print("stopped watching; the job goes on (make watch to follow it again)", file=sys.stderr)
    if outputs is not None:  # the stack exists: whatever happened, say what it costs and how to stop it
        print(billing_line(session, s, outputs.get("ClusterName", s.eks_cluster_name)), flush=True)
    if recorder.nodes:
        print(measured_bill_line(session, s, recorder, pending, finished), flush=True)
    return code


def measured_bill_line(session, s: Settings, recorder: NodeRecorder, pending: dict, finished: dict) -> str:
    """The GPU nodes' measured cost beside the synth's estimate (tools.bill), also written into the run summary."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tools.report import ReportError

    records = list(recorder.nodes.values())
    try:
        lives = bill.instance_lives(session.client("ec2", region_name=s.region), [r.instance_id for r in records], pending)
    except (BotoCoreError, ClientError) as error:
        return f"measured GPU bill: EC2 unreadable ({str(error).splitlines()[0][:120]})"
    prices = {name: spec.usd_per_hour for name, spec in INSTANCE_TYPES.items()}
    now = datetime.now(timezone.utc)
    try:
        spot = bill.spot_hour_prices(session.client("ec2", region_name=s.region), lives, now)
    except (BotoCoreError, ClientError) as error:  # priced at on-demand, spot's ceiling, and said so
        print(f"(spot price history unreadable, spot nodes priced at on-demand: {str(error).splitlines()[0][:120]})")
        spot = {}
    measured = bill.measure(records, lives, bill.timestamp(finished.get("end")), prices, now, spot)
    estimate = synth_estimate_usd(s)
    if finished.get("run"):
        try:
            bill.add_to_run_summary(finished["run"], bill.summary(measured, estimate))
        except (BotoCoreError, ClientError, ReportError, OSError) as error:
            print(f"(bill not written into the run summary: {str(error).splitlines()[0][:120]})", flush=True)
    return bill.bill_line(measured, estimate)


def synth_estimate_usd(s: Settings) -> float | None:
    """The per-run estimate `make synth` printed, from the template it left in cdk.out (None without one)."""
    from tools.review import job_cost_usd

    template = Path("cdk.out") / f"{s.stack_name}.template.json"
    return job_cost_usd(json.loads(template.read_text())) if template.is_file() else None


if __name__ == "__main__":
    sys.exit(main())
