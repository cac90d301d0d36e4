"""Print what a synthesized stack will create and what it costs per hour on demand.

Reads the templates in cdk.out (what `cdk deploy` would send), not the settings, so the
review shows the real result of any `-c` overrides; and cdk-nag's reports there: every finding,
and every suppression with its reason.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import shlex
import sys
from collections import Counter
from pathlib import Path

from cdk_constructs.instance_types import (
    EKS_CONTROL_PLANE_USD_PER_HOUR,
    INSTANCE_TYPES,
    INTERFACE_ENDPOINT_USD_PER_AZ_HOUR,
    NAT_GATEWAY_USD_PER_HOUR,
    PRICE_METADATA,
    PRICES_AS_OF,
)

_TOKEN = re.compile(r"\$\{Token\[[^\]]*\]\}")


def _subnet_azs(resources: dict, subnet_refs: list) -> list[str]:
    azs = []
    for ref in subnet_refs:
        logical_id = ref.get("Ref") if isinstance(ref, dict) else None
        az = resources.get(logical_id, {}).get("Properties", {}).get("AvailabilityZone")
        azs.append(az if isinstance(az, str) else "?")
    return sorted(set(azs))


def _rendered(value) -> str:
    """A CloudFormation string with its intrinsics (the bucket's name, ...) shown as placeholders."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_rendered(p) for p in parts)
    return "deploy-time-value"


# What a run's GPU nodes do before the first step, in seconds. Neither figure is published; both are
# assumptions until a real deploy measures them (`make watch` prints the node's Ready time and the pull).
GPU_NODE_BOOT_S = 180
"""EC2 launch into the placement group, AL2023 NVIDIA AMI boot, kubelet join, device plugins registered."""
RAY_IMAGE_GIB = 12.0
"""Compressed size assumed for the Ray Train image: AWS publishes none; its guide (aws/deep-learning-containers,
docs/ray-train/index.md) describes it as the PyTorch training image (EFA, NCCL, flash-attn, Transformer
Engine, DeepSpeed) plus Ray. The registry's manifest (the sum of its layer sizes) gives the true figure."""
IMAGE_PULL_MIB_S = 150
"""containerd's pull and unpack rate through the NAT gateway, assumed."""
NAT_GATEWAY_USD_PER_GB = 0.045
"""NAT gateway data processing in us-east-2 (Amazon VPC pricing, "NAT gateway pricing"; the same as its hourly
rate): every GPU node that starts pulls the whole image from ECR Public through it."""
GB_PER_GIB = 2**30 / 1e9


def nodegroup_instance_type(resources: dict, props: dict) -> str | None:
    """A node group's instance type: its InstanceTypes, or its launch template's InstanceType (a Capacity Block's:
    EKS takes the type in one place only)."""
    if props.get("InstanceTypes"):
        return props["InstanceTypes"][0]
    reference = (props.get("LaunchTemplate") or {}).get("Id")
    template_id = reference.get("Ref") if isinstance(reference, dict) else None
    return resources.get(template_id, {}).get("Properties", {}).get("LaunchTemplateData", {}).get("InstanceType")


def node_price(resource: dict, spec) -> tuple[float, str]:
    """(USD per node-hour, its basis) of a node group: what the synth priced it at (the GPU group's metadata: spot or a
    Capacity Block), else the type's on-demand list price."""
    priced = resource.get("Metadata", {}).get(PRICE_METADATA)
    if priced:
        return float(priced["usd_per_hour"]), priced["basis"]
    return (spec.usd_per_hour if spec else 0.0), f"on-demand list price ({PRICES_AS_OF})"


def _gpu_groups(template: dict) -> list[tuple[dict, object]]:
    """(resource, instance spec) of every node group of a GPU type."""
    resources = template.get("Resources", {})
    found = []
    for resource in resources.values():
        if resource["Type"] == "AWS::EKS::Nodegroup":
            spec = INSTANCE_TYPES.get(nodegroup_instance_type(resources, resource["Properties"]) or "")
            if spec and spec.gpus:
                found.append((resource, spec))
    return found


def _moving_price_note(template: dict) -> str:
    """Said beside a figure priced at a market price: the price the synth saw is not the one a run will pay."""
    moving = [r for r, _ in _gpu_groups(template) if r.get("Metadata", {}).get(PRICE_METADATA, {}).get("moves")]
    return "; at the spot price of the GPU price basis line, which moves" if moving else ""


def price_basis_line(template: dict) -> str | None:
    """How the GPU nodes are bought and priced: the basis every GPU figure of the review uses."""
    lines = [f"GPU price basis: {r['Properties'].get('CapacityType', 'ON_DEMAND')}, ${node_price(r, spec)[0]:.4f}/h per "
             f"node: {node_price(r, spec)[1]}" for r, spec in _gpu_groups(template)]
    return lines[0] if lines else None


def _manifests(template: dict, kind: str) -> list[dict]:
    resources = template.get("Resources", {}).values()
    found = [json.loads(_rendered(r["Properties"]["Manifest"]).replace("deploy-time-value", "bucket"))
             for r in resources if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and kind in json.dumps(r)]
    return [m for manifest in found for m in manifest if m.get("kind") == kind]


def _job_plan(template: dict):
    """(model, workload, cluster, Estimate, auto's line or None, options) of the RayJob's entrypoint on these nodes
    (planning.plan): the synth resolved auto into the entrypoint, and left what it picked and why in an
    annotation; or None."""
    from cdk_constructs.annotations import AUTO_ANNOTATION
    from planning.timing import estimate
    from planning.auto import model_of
    from planning.model_config import project_context
    from planning.workload import Layout, Workload, cluster_of
    from training.command_line import parse_args
    from training.config import ConfigError

    jobs = _manifests(template, "RayJob")
    if not jobs:
        return None
    try:
        cfg = parse_args(shlex.split(jobs[0]["spec"]["entrypoint"])[3:])
    except ConfigError:
        return None
    model = model_of(cfg, project_context(), needed=False)  # the synth cached any model's config.json it sized
    spec = INSTANCE_TYPES.get(cfg.instance_type or "")
    if model is None or spec is None or not spec.gpus:
        return None
    cluster = cluster_of(spec.name, cfg.workers // spec.gpus)
    priced = [node_price(r, s)[0] for r, s in _gpu_groups(template) if s.name == spec.name]
    if priced:  # the plan's run cost at the price the GPU nodes are bought at (spot, a Capacity Block)
        cluster = dataclasses.replace(cluster, usd_per_hour=priced[0] * cluster.nodes)
    work = Workload(seq_len=cfg.seq_len, micro_batch=cfg.micro_batch, grad_accum=cfg.grad_accum,
                    activation_checkpointing=cfg.activation_checkpointing, loss_chunk_tokens=cfg.loss_chunk_tokens,
                    steps=cfg.steps, lora_rank=cfg.lora_rank)
    chosen = estimate(model, work, cluster, Layout(cfg.sharding, not cfg.reshard_after_forward, cfg.reduce_dtype))
    return model, work, cluster, chosen, jobs[0]["metadata"].get("annotations", {}).get(AUTO_ANNOTATION), cfg


def training_estimate(template: dict):
    """(the planning.plan line, its Estimate) for the RayJob's entrypoint on these nodes, or None."""
    from planning.plan import summary_line

    found = _job_plan(template)
    if found is None:
        return None
    model, work, cluster, chosen = found[:4]
    return "training: " + summary_line(model, work, cluster, chosen) + " (python -m planning.plan for every layout)", chosen


def training_plan_line(template: dict) -> str | None:
    """What the RayJob's trainer will do on these nodes (planning.plan), from the template's own entrypoint."""
    found = training_estimate(template)
    return found[0] if found else None


def training_auto_line(template: dict) -> str | None:
    """What auto picked for the RayJob's run and why, as the synth resolved it; None without auto."""
    found = _job_plan(template)
    return found[4] if found else None


def training_fp8_line(template: dict) -> str | None:
    """fp8's predicted gain on the RayJob's GPU at its shape (planning.fp8), and the precision it runs in."""
    from planning.auto import fp8_shard
    from planning.fp8 import fp8_line

    found = _job_plan(template)
    if found is None:
        return None
    model, work, cluster, _, _, cfg = found
    return (f"training precision {cfg.precision}; " + fp8_line(cluster.gpu, work, model, fp8_shard(cfg, cluster),
                                                             not cfg.reshard_after_forward, cfg.lora_rank))


def training_batch_line(template: dict) -> str | None:
    """The smallest batch that keeps the links at most 10% of the step (planning.plan), for the RayJob's job."""
    from planning.search import batch_line

    found = _job_plan(template)
    return batch_line(*found[:4]) if found else None


def training_stop_line(template: dict) -> str | None:
    """What a drained GPU worker pod needs to save its step (planning.checkpoint_time), against the grace period the
    template gives it; None where the planner knows the run not."""
    from planning.checkpoint_time import stop_estimate

    found = _job_plan(template)
    if found is None:
        return None
    model, work, cluster, chosen = found[:4]
    estimate = stop_estimate(model, work.lora_rank, cluster, chosen.step_s)
    pod = _manifests(template, "RayJob")[0]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    return f"stop: {estimate.line()}; the worker pods get {pod.get('terminationGracePeriodSeconds', 30)} s"


def first_step_s() -> float:
    """Seconds from a job's start to its first step: GPU nodes boot, then pull the Ray image."""
    return GPU_NODE_BOOT_S + RAY_IMAGE_GIB * 1024 / IMAGE_PULL_MIB_S


def _scale_down_s(template: dict) -> float | None:
    """The autoscaler's scale-down-unneeded-time, or None when no autoscaler is deployed (fixed GPU nodes)."""
    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart" and props.get("Chart") == "cluster-autoscaler":
            unneeded = json.loads(_rendered(props["Values"]))["extraArgs"]["scale-down-unneeded-time"]
            return float(unneeded.removesuffix("m")) * 60
    return None


def _gpu_nodes_per_job(template: dict) -> int:
    """The GPU nodes a job starts: the GPU group's maximum."""
    return max((r["Properties"]["ScalingConfig"]["MaxSize"] for r, _ in _gpu_groups(template)), default=0)


def image_pull_usd(nodes: int) -> float:
    """What a job start pays the NAT gateway for its nodes' image pulls."""
    return nodes * RAY_IMAGE_GIB * GB_PER_GIB * NAT_GATEWAY_USD_PER_GB


def _pulls_through_cache(template: dict) -> bool:
    return any(r["Type"] == "AWS::ECR::PullThroughCacheRule" for r in template.get("Resources", {}).values())


def _image_pull_text(template: dict, nodes: int) -> str:
    if _pulls_through_cache(template):
        # ECR keeps the layers in S3, reached through the free S3 gateway endpoint. But the Amazon ECR User Guide
        # ("Amazon ECR interface VPC endpoints", considerations): the first pull of an image through a pull-through
        # cache rule over the interface endpoints needs a route to the internet through a NAT gateway; later pulls
        # don't. What the NAT processes then is not published: at most one node's pull.
        return ("the image through the ECR pull-through cache (layers from S3 off the NAT: ~$0; a tag's first pull "
                f"needs the NAT, ECR User Guide: up to ~${image_pull_usd(1):.2f} once)")
    return (f"~${image_pull_usd(nodes):.2f} pulling the image through the NAT ({nodes} x {RAY_IMAGE_GIB:g} GiB "
            f"at ${NAT_GATEWAY_USD_PER_GB}/GB processed)")


def interface_endpoint_azs(template: dict) -> int:
    """Endpoint-AZs of the template's interface endpoints: each bills by the hour."""
    return sum(len(r["Properties"].get("SubnetIds", [])) for r in template.get("Resources", {}).values()
               if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"].get("VpcEndpointType") == "Interface")


def job_billed_s(template: dict) -> tuple[float, float, float, float] | None:
    """(start, training, TTL, scale-down) seconds the GPU nodes bill per run, or None without a plan, a job or an
    autoscaler."""
    found = training_estimate(template)
    jobs = _manifests(template, "RayJob")
    scale_down = _scale_down_s(template)
    if found is None or not jobs or scale_down is None:
        return None
    return first_step_s(), found[1].run_s, jobs[0]["spec"].get("ttlSecondsAfterFinished", 0), scale_down


def gpu_usd_per_hour(template: dict) -> float:
    """What the autoscaled GPU nodes cost per hour while a job runs (above their idle minimum)."""
    busy = 0.0
    for resource, spec in _gpu_groups(template):
        scaling = resource["Properties"]["ScalingConfig"]
        busy += node_price(resource, spec)[0] * (scaling["MaxSize"] - scaling["MinSize"])
    return busy


def job_cost_usd(template: dict) -> float | None:
    """The synth's estimate of one run's GPU instance hours in $ (job_cost_lines' first figure; the NAT's image
    pulls apart), for the watch's measured bill."""
    parts = job_billed_s(template)
    return gpu_usd_per_hour(template) * sum(parts) / 3600 if parts else None


def job_cost_lines(template: dict, gpu_usd_per_hour: float) -> list[str]:
    """Per run: the GPU nodes' hours from their start to their removal (boot and pull, training, the finished
    cluster's TTL, the autoscaler's scale-down delay), and their image pulls through the NAT gateway; how long
    from deploy to the first step; and what a lone GPU node costs when its partner gets no capacity."""
    found = training_estimate(template)
    jobs = _manifests(template, "RayJob")
    scale_down = _scale_down_s(template)
    start = first_step_s()
    lines = [f"deploy to first step: ~{start / 60:.0f} min after the stack is up (GPU node boot ~{GPU_NODE_BOOT_S / 60:.0f} min "
             f"+ pulling the ~{RAY_IMAGE_GIB:g} GiB Ray image at ~{IMAGE_PULL_MIB_S} MiB/s; both assumed, see tools/review.py)"]
    if found is None or not jobs:
        return lines
    if scale_down is None:
        return lines + ["per run: GPU nodes run from deploy to destroy (gpu_scale_to_zero is false); see the hourly cost"]
    ttl = jobs[0]["spec"].get("ttlSecondsAfterFinished", 0)
    billed_s = sum(job_billed_s(template))
    nodes = _gpu_nodes_per_job(template)
    lines.append(f"per run: ~${gpu_usd_per_hour * billed_s / 3600:,.2f} of GPU nodes (${gpu_usd_per_hour:.2f}/h for "
                 f"~{billed_s / 60:.0f} min: start ~{start / 60:.0f} + training ~{found[1].run_s / 60:.0f} + "
                 f"TTL {ttl / 60:g} + scale-down {scale_down / 60:g}) + {_image_pull_text(template, nodes)}, "
                 "on top of the idle cost" + _moving_price_note(template))
    lines += partial_capacity_lines(jobs[0]["spec"], gpu_usd_per_hour / max(nodes, 1), scale_down)
    return lines


def partial_capacity_lines(job: dict, node_usd_per_hour: float, scale_down_s: float) -> list[str]:
    """What one GPU node bills when it starts and its partner is refused capacity: each attempt waits out
    preRunningDeadlineSeconds (KubeRay retries PreRunningDeadlineExceeded under backoffLimit, each attempt on a
    fresh Ray cluster that lands on the node still there), then the failed job's TTL and the scale-down delay.
    Without that deadline it waits for activeDeadlineSeconds, which is never retried (rayjob_controller.go)."""
    pre_running, active = job.get("preRunningDeadlineSeconds"), job.get("activeDeadlineSeconds")
    ttl = job.get("ttlSecondsAfterFinished", 0)
    if pre_running is None:
        waited_s = (active or 0) + ttl + scale_down_s
        return [f"partial capacity: a GPU node whose partner gets no capacity bills until activeDeadlineSeconds: "
                f"~{waited_s / 60:.0f} min, ~${node_usd_per_hour * waited_s / 3600:.2f}"]
    attempts = job.get("backoffLimit", 0) + 1
    waited_s = attempts * pre_running + ttl + scale_down_s
    return [f"partial capacity: a GPU node whose partner gets no capacity bills ~{waited_s / 60:.0f} min, "
            f"~${node_usd_per_hour * waited_s / 3600:.2f} ({attempts} attempt(s) x preRunningDeadlineSeconds "
            f"{pre_running} + TTL {ttl / 60:g} min + scale-down {scale_down_s / 60:g} min)"]


def configmap_lines(template: dict) -> list[str]:
    """The trainer ConfigMap against the API server's limits under `kubectl apply`, and the modules it ships."""
    import base64
    import io
    import zipfile

    from cdk_constructs.trainer_archive import (ANNOTATIONS_BUDGET_BYTES, ANNOTATIONS_LIMIT_BYTES, ARCHIVE_KEY,
                                                annotations_bytes, kubectl_applied_annotations)

    lines = []
    for configmap in _manifests(template, "ConfigMap"):
        archive = (configmap.get("binaryData") or {}).get(ARCHIVE_KEY)
        if archive is None:
            continue
        stored = annotations_bytes(kubectl_applied_annotations(configmap))
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(archive))) as opened:
            modules = [name.removesuffix(".py") for name in opened.namelist()]
        lines.append(f"trainer ConfigMap: {stored:,} bytes stored by `kubectl apply`, {stored / ANNOTATIONS_LIMIT_BYTES:.0%} "
                     f"of the API server's {ANNOTATIONS_LIMIT_BYTES:,} (synth refuses above {ANNOTATIONS_BUDGET_BYTES:,}); "
                     f"{len(modules)} modules: {', '.join(modules)}")
    return lines


def review_lines(template: dict) -> list[str]:
    """A short human review of one CloudFormation template (pure: no I/O)."""
    resources = template.get("Resources", {})
    types = Counter(r["Type"] for r in resources.values())
    lines = [f"{len(resources)} resources"]
    idle, busy_gpu = 0.0, 0.0
    for resource in resources.values():
        if resource["Type"] == "AWS::EKS::Cluster":
            idle += EKS_CONTROL_PLANE_USD_PER_HOUR
            lines.append(f"EKS cluster, Kubernetes {resource['Properties'].get('Version')}: "
                         f"${EKS_CONTROL_PLANE_USD_PER_HOUR:.2f}/h")
    for resource in resources.values():
        if resource["Type"] != "AWS::EKS::Nodegroup":
            continue
        props = resource["Properties"]
        instance_type = nodegroup_instance_type(resources, props)
        scaling = props["ScalingConfig"]
        low, high = scaling["MinSize"], scaling["MaxSize"]
        spec = INSTANCE_TYPES.get(instance_type or "")
        price = node_price(resource, spec)[0]
        idle += price * low
        busy_gpu += price * (high - low) if spec and spec.gpus else 0.0
        role = props.get("Labels", {}).get("role", "nodes")
        gpus = f", {spec.gpus} x {spec.gpu_model} GPU, {spec.efa_interfaces} EFA each" if spec and spec.gpus else ""
        count = f"{low}" if low == high else f"{low} to {high} (autoscaled)"
        lines.append(
            f"{role}: {count} x {instance_type}{gpus}, AMI {props.get('AmiType')}, "
            f"AZ {', '.join(_subnet_azs(resources, props.get('Subnets', [])))}: ${price * low:.2f}/h"
            + (f", ${price * high:.2f}/h while a job runs" if low != high else "")
        )
    nat = types.get("AWS::EC2::NatGateway", 0)
    idle += nat * NAT_GATEWAY_USD_PER_HOUR
    lines.append(f"NAT gateways: {nat}: ${nat * NAT_GATEWAY_USD_PER_HOUR:.3f}/h (plus data processed)")
    endpoint_azs = interface_endpoint_azs(template)
    if endpoint_azs:
        idle += endpoint_azs * INTERFACE_ENDPOINT_USD_PER_AZ_HOUR
        lines.append(f"interface endpoints: {endpoint_azs} endpoint-AZ(s): "
                     f"${endpoint_azs * INTERFACE_ENDPOINT_USD_PER_AZ_HOUR:.3f}/h (plus $0.01/GB processed)")
    lines.append(f"placement group: {'cluster' if types.get('AWS::EC2::PlacementGroup') else 'none'}")
    lines += filter(None, [price_basis_line(template)])
    lines.append(f"idle cost (no job running): ${idle:.2f}/hour (${idle * 24:.0f}/day; {PRICES_AS_OF}; "
                 "excludes storage, data transfer and logs)")
    plan = training_plan_line(template)
    if plan:
        lines.append(plan)
        lines += filter(None, [training_auto_line(template), training_batch_line(template), training_fp8_line(template),
                               training_stop_line(template)])
    lines += job_cost_lines(template, busy_gpu)
    lines += configmap_lines(template)
    return lines


def nag_report_rows(out: Path, stack: str) -> list[dict]:
    """The rows of every cdk-nag pack's report of one stack (AwsSolutions, EksV2: <pack>-<path>-NagReport.csv)."""
    rows = []
    for report in sorted(out.glob(f"*-{stack}-NagReport.csv")):
        with report.open(newline="") as stream:
            rows.extend(csv.DictReader(stream))
    return rows


def nag_lines(rows: list[dict]) -> list[str]:
    """cdk-nag's report as review lines: every finding, then each suppression once with its reason."""
    findings = [r for r in rows if r["Compliance"] not in ("Compliant", "Suppressed")]
    # A suppression given for several findings (a list of managed policies) carries the finding first: [Policy::...]
    suppressed = Counter((r["Rule ID"], re.sub(r"^\[[^\]]*\] ", "", r["Exception Reason"]))
                         for r in rows if r["Compliance"] == "Suppressed")
    lines = [f"cdk-nag: {len(rows)} checks, {len(findings)} finding(s), {sum(suppressed.values())} suppressed"]
    lines += [f"{r['Rule Level'].lower()} {r['Rule ID']} ({r['Compliance'].lower()}) {r['Resource ID']}: {r['Rule Info']}"
              for r in findings]
    lines += [f"suppressed {rule} x{count}: {reason}" for (rule, reason), count in suppressed.items()]
    return lines


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "cdk.out")
    manifest = json.loads((out / "manifest.json").read_text())
    for name, artifact in manifest["artifacts"].items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        template = json.loads((out / artifact["properties"]["templateFile"]).read_text())
        print(f"== {name} ({artifact.get('environment', '')})")
        for line in review_lines(template) + nag_lines(nag_report_rows(out, name)):
            print(f"   {line}")
        print("   review everything in", out / artifact["properties"]["templateFile"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
