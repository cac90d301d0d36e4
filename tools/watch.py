"""Follow a deployed stack to a verified training run: `python -m tools.watch [-c key=value ...]`.

1. Reads the stack's outputs (cluster, namespace, RayJob, bucket) from CloudFormation.
2. Talks to the EKS API with a token signed from the caller's AWS credentials (no kubectl or
   aws CLI needed; the caller needs an access entry: the admin_principal_arn setting).
3. Waits until every GPU node advertises the GPUs and EFA devices its worker pod requests,
   naming the node and what is missing when that does not happen in time.
4. Follows the RayJob to its end, printing each status change and the trainer's step lines,
   then a summary: result, NCCL transport verdict, tokens/s, where the checkpoints are, and the
   run's report (tools.report: a PNG of loss, validation loss, throughput, MFU and memory).
Exit status: 0 when the job succeeded, 1 when it failed or nodes never became ready, 2 on errors.
"""

from __future__ import annotations

import base64
import sys
import tempfile
import time

from cdk_constructs.instance_types import INSTANCE_TYPES
from stacks.settings import Settings
from tools.cli import parse, tool_parser
from tools import cluster_status as cs
from training.records import RECORD_PREFIX

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


def wait_for_gpu_nodes(api, s: Settings, timeout_s: int, poll_s: int) -> bool:
    from kubernetes import client

    from cdk_constructs.node_groups import GPU_NODE_LABELS

    core = client.CoreV1Api(api)
    spec = INSTANCE_TYPES[s.gpu_instance_type]
    selector = ",".join(f"{k}={v}" for k, v in GPU_NODE_LABELS.items())
    deadline, last = time.monotonic() + timeout_s, None
    print(f"waiting for {s.gpu_node_count} GPU node(s) with {spec.gpus} x {cs.GPU_RESOURCE} and "
          f"{spec.efa_interfaces} x {cs.EFA_RESOURCE} allocatable", flush=True)
    while True:
        nodes = [_plain(api, n) for n in core.list_node(label_selector=selector).items]
        pods = _plain(api, core.list_namespaced_pod("kube-system"))["items"]
        on_node = {}
        for pod in pods:
            on_node.setdefault(pod.get("spec", {}).get("nodeName"), []).append(pod["metadata"]["name"])
        reports = [cs.node_report(n, spec.gpus, spec.efa_interfaces, on_node.get(n["metadata"]["name"], []))
                   for n in nodes]
        ready, problems = cs.nodes_verdict(reports, s.gpu_node_count)
        if ready:
            print(f"all {len(reports)} GPU node(s) ready: " + ", ".join(f"{r.name} ({r.gpus} GPU, {r.efa} EFA)" for r in reports))
            return True
        if problems != last:
            print("  " + "\n  ".join(problems), flush=True)
            last = problems
        if time.monotonic() > deadline:
            print(f"FAILED: GPU nodes not ready after {timeout_s} s:\n  " + "\n  ".join(problems))
            return False
        time.sleep(poll_s)


def follow_job(api, namespace: str, job_name: str, bucket: str | None, poll_s: int, timeout_s: int) -> bool:
    """Follow the RayJob until a terminal state (True when it succeeded) or until timeout_s have passed."""
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
                if "step " in line or "NCCL transport" in line or "run summary" in line or "Error" in line:
                    print("  " + line.strip()[:300], flush=True)
            printed = len(log_lines)
        if job.terminal:
            progress = cs.trainer_progress(log_lines)
            print("\n".join(cs.final_summary(job, progress, bucket)))
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


def billing_lines(api, s: Settings) -> list[str]:
    """What still runs, read from the cluster's nodes when it answers, else from the settings."""
    try:
        from kubernetes import client

        nodes = [_plain(api, n) for n in client.CoreV1Api(api).list_node().items] if api else None
    except Exception:  # the cluster may be unreachable by now; the settings still say what was deployed
        nodes = None
    if nodes is None:
        kinds = [s.gpu_instance_type] * s.gpu_node_count + [s.system_instance_type] * s.system_node_count
    else:
        kinds = cs.node_instance_types(nodes)
    return cs.still_billing(kinds, s.nat_gateways, s.stack_name)


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
    parser.add_argument("--node-timeout", type=positive_int, default=1800, help="seconds to wait for GPU nodes")
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
    code = 2
    try:
        outputs = stack_outputs(session, s)
        api = kubernetes_api(session, outputs["ClusterName"], s.region)
        if not wait_for_gpu_nodes(api, s, args.node_timeout, args.poll):
            code = 1
        else:
            timeout = args.job_timeout or s.training.active_deadline_seconds + 1800
            succeeded = follow_job(api, outputs["Namespace"], outputs["RayJobName"], outputs.get("CheckpointBucket"),
                                   args.poll, timeout)
            code = 0 if succeeded else 1
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
        print("\n".join(billing_lines(api, s)), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
