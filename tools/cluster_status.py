"""What the cluster's API objects say, in plain words: GPU node readiness, RayJob state, trainer logs.

Pure functions over API objects as JSON dicts (what the Kubernetes API returns; the watcher turns
client objects into these with ApiClient.sanitize_for_serialization), so every verdict is unit-
tested on recorded objects without a cluster.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# The device-plugin daemonsets (Helm releases in kube-system, cdk_constructs/device_plugins.py), by a
# substring of their pod names.
PLUGIN_PODS = {GPU_RESOURCE: ("nvidia-device-plugin", "NVIDIA device plugin"),
               EFA_RESOURCE: ("efa-k8s-device-plugin", "EFA device plugin")}

# KubeRay 1.7 RayJob deployment statuses after which the job runs nothing more (rayjob_controller.go
# Reconcile: Complete and Failed only handle the cluster's deletion; a failure with backoffLimit left becomes
# Retrying in the same pass (checkBackoffLimitAndUpdateStatusIfNeeded), so Failed is final; ValidationFailed
# is never reconciled again; Suspended waits for spec.suspend to turn false).
TERMINAL_DEPLOYMENT = {"Complete", "Failed", "ValidationFailed", "Suspended"}
FAILURE_HINTS = {
    "DeadlineExceeded": "the job ran past training.active_deadline_seconds",
    "SubmissionFailed": "the submitter pod could not submit the job (kubectl logs job/<name>)",
    "AppFailed": "the trainer exited with an error (its log lines are above)",
    "ValidationFailed": "KubeRay rejected the RayJob spec (its message names the rule; cdk synth checks these rules)",
    "PreRunningDeadlineExceeded": (
        "the Ray cluster was not running within training.pre_running_deadline_seconds of the attempt's start: "
        "most often one GPU node launched and its partner was refused capacity (the scale-up lines above say why); "
        "KubeRay retries on a fresh cluster while training.backoff_limit allows, else the nodes scale down"),
    "JobDeploymentStatusTransitionGracePeriodExceeded": "the Ray job ended but KubeRay could not finish the RayJob",
}


def quantity(value) -> int:
    """Integer count of a Kubernetes quantity as extended resources use it ('4', 4, None)."""
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        return 0


@dataclass
class NodeReport:
    name: str
    ready: bool
    gpus: int
    efa: int
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing


def node_report(node: dict, expected_gpus: int, expected_efa: int, plugin_pods_on_node: list[str] = ()) -> NodeReport:
    """Whether one GPU node is Ready and advertises the GPUs and EFA devices its pod will request."""
    name = node["metadata"]["name"]
    conditions = {c["type"]: c for c in node.get("status", {}).get("conditions") or []}
    ready_condition = conditions.get("Ready", {})
    ready = ready_condition.get("status") == "True"
    allocatable = node.get("status", {}).get("allocatable") or {}
    gpus, efa = quantity(allocatable.get(GPU_RESOURCE)), quantity(allocatable.get(EFA_RESOURCE))
    missing = []
    if not ready:
        why = ready_condition.get("reason") or "no Ready condition yet"
        missing.append(f"not Ready ({why})")
    for resource, have, want in ((GPU_RESOURCE, gpus, expected_gpus), (EFA_RESOURCE, efa, expected_efa)):
        if have < want:
            pod_part, plugin = PLUGIN_PODS[resource]
            running = any(pod_part in pod for pod in plugin_pods_on_node)
            hint = "its plugin pod runs but has not registered them yet" if running else \
                f"the {plugin} has no pod on this node (taint toleration, node selector or allowlist?)"
            missing.append(f"{resource} {have} of {want} allocatable: {hint}")
    return NodeReport(name, ready, gpus, efa, missing)


def nodes_verdict(reports: list[NodeReport], expected_nodes: int) -> tuple[bool, list[str]]:
    """(all ready, one line per problem) for the GPU node group as a whole."""
    lines = []
    if len(reports) < expected_nodes:
        lines.append(f"{len(reports)} of {expected_nodes} GPU nodes have joined the cluster")
    for report in reports:
        lines += [f"{report.name}: {item}" for item in report.missing]
    return not lines, lines


@dataclass
class JobReport:
    deployment: str
    job_status: str
    terminal: bool
    succeeded: bool
    line: str


def rayjob_report(rayjob: dict) -> JobReport:
    """KubeRay's RayJob status as one line, and whether it is over and how."""
    status = rayjob.get("status") or {}
    deployment = status.get("jobDeploymentStatus") or "New"
    job_status = status.get("jobStatus") or "-"
    reason, message = status.get("reason") or "", (status.get("message") or "").strip()
    terminal = deployment in TERMINAL_DEPLOYMENT
    succeeded = terminal and deployment == "Complete" and job_status == "SUCCEEDED"
    line = f"RayJob {rayjob['metadata']['name']}: deployment {deployment}, job {job_status}"
    if status.get("failed"):
        line += f", {status['failed']} failed attempt(s)"
    if reason:
        line += f"; {reason}: {FAILURE_HINTS.get(reason, 'see the RayJob events')}"
    if message and (reason or (terminal and not succeeded)):
        line += f" ({message.splitlines()[0][:200]})"
    if terminal and deployment == "Complete" and job_status != "SUCCEEDED":
        line += f"; the Ray job ended {job_status}"
    if deployment == "Suspended":
        line += "; the RayJob is suspended (spec.suspend): nothing runs until it is resumed"
    return JobReport(deployment, job_status, terminal, succeeded, line)


_TRANSPORT = re.compile(r"NCCL transport: (.+)$")
_SUMMARY = re.compile(r"run summary: (\{.*\})\s*$")
# The exception line a failing trainer ends with (Ray also logs harmless tracebacks on its own).
_ERROR = re.compile(r"\b\w+(Error|Exception): .+")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class TrainerProgress:
    record: dict | None = None
    """The trainer's last step record (training.metrics.StepStats as JSON)."""
    transport: str | None = None
    summary: dict | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def step(self) -> int:
        return self.record["step"] if self.record else 0

    @property
    def steps(self) -> int:
        return self.record["steps"] if self.record else 0

    @property
    def last_step(self) -> str | None:
        r = self.record
        if not r:
            return None
        mfu = f", MFU {r['mfu'] * 100:.1f}%" if r.get("mfu") is not None else ""
        return (f"step {r['step']}/{r['steps']} at {r['time']}: loss {r['loss']:.4f}, "
                f"{r['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU{mfu}, {r['step_time_s'] * 1000:.0f} ms/step")


def trainer_progress(lines: list[str]) -> TrainerProgress:
    """What the trainer's log says so far: its machine-readable step records (training.metrics
    RECORD_PREFIX), the transport verdict, the run summary and errors."""
    from training.records import parse_record

    progress = TrainerProgress()
    for raw in lines:
        line = _ANSI.sub("", raw).rstrip()
        if (record := parse_record(line)) is not None:
            progress.record = record
            continue
        if m := _TRANSPORT.search(line):
            progress.transport = m.group(1)
        if m := _SUMMARY.search(line):
            try:
                progress.summary = json.loads(m.group(1))
            except json.JSONDecodeError:
                pass
        if m := _ERROR.search(line):
            progress.errors.append(line[m.start():][:300])
    return progress


def timed_out_line(job: JobReport, progress: TrainerProgress, timeout_s: int) -> str:
    """What the watch says when it gives up first: the job is not over, and it goes on without us."""
    where = f", at {progress.last_step}" if progress.last_step else ""
    return (f"STOPPED WATCHING after {timeout_s} s: {job.line}{where}; the job goes on "
            "(make watch follows it again; make destroy stops it and the billing)")


def final_summary(job: JobReport, progress: TrainerProgress, bucket: str | None) -> list[str]:
    """The lines printed when the job is over."""
    lines = [("SUCCEEDED: " if job.succeeded else "FAILED: ") + job.line]
    lines.append(f"transport: {progress.transport or 'no NCCL transport line in the log'}")
    summary = progress.summary or {}
    if summary.get("tokens_per_s_per_gpu"):
        mfu = f", MFU {summary['mfu'] * 100:.1f}%" if summary.get("mfu") else ""
        lines.append(f"throughput: {summary['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU{mfu}, "
                     f"final loss {summary.get('final_loss')}, {summary.get('wall_time_s')} s")
    elif progress.last_step:
        lines.append(f"last step: {progress.last_step}")
    if summary.get("run"):
        lines.append(f"run summary: {summary['run']}/run_summary.json")
    if summary.get("checkpoint"):
        lines.append(f"checkpoint: {summary['checkpoint']}")
    elif bucket:
        lines.append(f"checkpoints: s3://{bucket}/runs/")
    if not job.succeeded and progress.errors:
        lines.append(f"last error: {progress.errors[-1]}")
    return lines


# ---------------------------------------------------------------- what still bills


def still_billed(groups: list[tuple[str, str, int]], nat_gateways: int, interface_endpoint_azs: int = 0) -> str:
    """The line a watch ends with, whatever happened: what bills now and how to stop it.

    `groups` is (role label, instance type, desired size) of each node group, as EKS's DescribeNodegroup
    says: a GPU group scaled to zero bills nothing, the control plane, system nodes, NAT and interface
    endpoints (per AZ each is in: the image cache's) bill until destroy.
    """
    from cdk_constructs.instance_types import (EKS_CONTROL_PLANE_USD_PER_HOUR, INSTANCE_TYPES,
                                               INTERFACE_ENDPOINT_USD_PER_AZ_HOUR, NAT_GATEWAY_USD_PER_HOUR)

    hourly = (EKS_CONTROL_PLANE_USD_PER_HOUR + nat_gateways * NAT_GATEWAY_USD_PER_HOUR
              + interface_endpoint_azs * INTERFACE_ENDPOINT_USD_PER_AZ_HOUR)
    parts, unknown = ["control plane"], False
    for role, instance_type, count in sorted(groups, key=lambda g: g[0] != "system"):  # system nodes first
        if count == 0:
            continue
        noun = {"system": "system node", "gpu-worker": "GPU node"}.get(role, f"{role} node")
        parts.append(f"{noun}" if count == 1 else f"{count} {noun}s")
        spec = INSTANCE_TYPES.get(instance_type)
        if spec is None:
            parts[-1] += f" ({instance_type}, price unknown)"
            unknown = True
        else:
            hourly += spec.usd_per_hour * count
    parts.append("NAT" if nat_gateways == 1 else f"{nat_gateways} NAT gateways")
    if interface_endpoint_azs:
        parts.append(f"{interface_endpoint_azs} interface endpoint{'s' if interface_endpoint_azs > 1 else ''}")
    return (f"still billed: {', '.join(parts)}: ${hourly:.2f}/h{' plus the unknown types' if unknown else ''}; "
            "make destroy to stop")


# Kubernetes events along a job's life, by reason: Cluster Autoscaler's (kubernetes/autoscaler 1.36.1:
# processors/status/eventing_scale_up_processor.go on pods, core/scaleup/orchestrator/executor.go and
# core/scaledown/actuation on the cluster), the kubelet's image pulls and the scheduler's verdicts.
LIFECYCLE_EVENTS = {
    "TriggeredScaleUp": "scale-up requested",
    "NotTriggerScaleUp": "no scale-up",
    "ScaledUpGroup": "scale-up",
    "FailedToScaleUpGroup": "scale-up failed",
    "ScaleDown": "scale-down",
    "Pulling": "pulling image",
    "Pulled": "image pulled",
}
# orchestrator/skippedreasons.go BackoffReason: the group's last launch failed (e.g. InsufficientInstanceCapacity,
# which the AWS provider reads from the ASG's failed scaling activity, auto_scaling_groups.go isNodeGroupAvailable).
BACKOFF = "in backoff after failed scale-up"
BACKOFF_HINT = ("the GPU group's last launch failed (InsufficientInstanceCapacity or a quota): the autoscaler "
                "retries after 5 min, doubling to 30 min, while the workers wait; make preflight checks capacity")


def lifecycle_lines(events: list[dict], seen: set) -> list[str]:
    """One line per new event of LIFECYCLE_EVENTS, oldest first; `seen` remembers what was printed."""
    def when(event: dict) -> str:
        return event.get("lastTimestamp") or event.get("eventTime") or ""

    lines = []
    for event in sorted(events, key=when):
        reason = event.get("reason")
        key = (event.get("metadata", {}).get("uid"), event.get("count"), reason)
        if reason not in LIFECYCLE_EVENTS or key in seen:
            continue
        seen.add(key)
        message = (event.get("message") or "").strip().splitlines()[0][:240] if event.get("message") else ""
        subject = (event.get("involvedObject") or {}).get("name", "")
        line = f"{LIFECYCLE_EVENTS[reason]}: {subject}: {message}"
        if BACKOFF in message:
            line += f" ({BACKOFF_HINT})"
        lines.append(line)
    return lines


def node_instance_types(nodes: list[dict]) -> list[str]:
    """The instance type of each node, from its well-known label."""
    return [(n.get("metadata", {}).get("labels") or {}).get("node.kubernetes.io/instance-type", "unknown") for n in nodes]
