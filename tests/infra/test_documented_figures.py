"""Every README figure the code computes (costs, sizes, step times, memory, counts, paths) is what the code computes
now: each test reads a passage of README.md and recomputes its figures with the code's own functions (the synth
review of the session's template, planning.plan, the planner's resolution of auto, still_billed, the trainer's
constants). A change to the code that moves a figure fails here until README says the new one; the defaults are
test_documented_defaults.py's, cdk-nag's counts test_eks_nag.py's (its synthesis writes the reports)."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from cdk_constructs.instance_types import INSTANCE_TYPES, worker_pod_resources
from planning.workload import MODELS
from stacks.context import settings_from_context
from stacks.settings import Settings, SettingsError, planned_trainer_options
from tests.conftest import ROOT, base_context, resources_of
from tests.infra import readme
from tools import review
from tools.cluster_status import still_billed

DEFAULTS = Settings()
QWEN = MODELS["qwen2.5-1.5b"]


@pytest.fixture(scope="module")
def printed(template) -> list[str]:
    """What `make synth` prints of the default deployment (the review, without cdk-nag's lines)."""
    return review.review_lines(template.to_json())


def planned(**overrides) -> dict:
    options, _ = planned_trainer_options(settings_from_context(base_context() | overrides))
    return options


def plan_output(*argv: str) -> str:
    from planning.plan import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


def dollars(line: str) -> float:
    return float(re.search(r"\$([\d.]+)/h", line).group(1))


# ---------------------------------------------------------------------- sample output


def test_the_review_sample_is_what_make_synth_prints(printed):
    sample = readme.sample_block("`make synth` ends with a review read from the synthesized template")
    header, *lines = sample
    assert header == f"== {DEFAULTS.stack_name} (aws://unknown-account/{DEFAULTS.region})"
    reviewed = [line for line in lines if not line.startswith(("cdk-nag:", "suppressed "))]
    assert readme.unshown(reviewed, printed) == []


def test_the_speed_samples_are_what_make_synth_prints(printed):
    speed = readme.sample_block("## Speed on 2 x g6.12xlarge")
    auto = readme.sample_block("refuses an auto only the planner resolves")
    assert len(speed) == 3 and len(auto) == 1
    assert readme.unshown(speed, printed) + readme.unshown(auto, printed) == []


def test_a_wrong_figure_in_a_sample_is_found():
    printed = ["cdk-nag: 52 checks, 0 finding(s), 19 suppressed", "trainer ConfigMap: 113,030 bytes stored by x; 24 modules: a, b"]
    assert readme.unshown(["trainer ConfigMap: 113,030 bytes stored by ...; 24 modules: a, ..."], printed) == []
    assert readme.unshown(["trainer ConfigMap: 114,110 bytes stored by ...; 25 modules: a, ..."], printed) == [
        "README: 'trainer ConfigMap: 114,110 bytes stored by ...; 25 modules: a, ...'\n  prints: " + repr(printed[1])]
    assert readme.unshown(["cdk-nag: 46 checks, 0 finding(s), 17 suppressed"], printed) != []


class _Account:
    """EC2 and Service Quotas as the README's preflight sample has them: the GPU type offered in the GPU AZ, a
    G-family quota of 64 vCPU, nothing running."""

    def describe_instance_type_offerings(self, **_):
        return {"InstanceTypeOfferings": [{"Location": DEFAULTS.gpu_availability_zone}]}

    def get_paginator(self, _):
        return type("Pages", (), {"paginate": lambda self, **__: [{"Reservations": []}]})()

    def get_service_quota(self, **_):
        return {"Quota": {"Value": 64.0}}


def test_the_preflight_sample_is_what_preflight_prints():
    from tools import preflight

    account = _Account()
    checks = [preflight.check_offered(account, DEFAULTS.gpu_instance_type, DEFAULTS.gpu_availability_zone),
              preflight.check_vcpu_quota(account, account, DEFAULTS.gpu_instance_type, DEFAULTS.gpu_node_count,
                                         DEFAULTS.region, "GPU nodes")]
    sample = readme.sample_block("Any FAIL stops the deploy before")
    # An excerpt of the whole table, whose name column is as wide as its longest check name.
    assert [" ".join(line.split()) for line in sample] == [" ".join(line.split())
                                                          for line in preflight.format_table(checks).splitlines()]


def test_the_watchs_last_line_is_what_it_prints_for_the_idle_stack():
    [sample] = [line for line in readme.text().splitlines() if line.startswith("still billed: ")]
    idle = [("system", DEFAULTS.system_instance_type, DEFAULTS.system_node_count), ("gpu-worker", DEFAULTS.gpu_instance_type, 0)]
    assert sample == still_billed(idle, DEFAULTS.nat_gateways, DEFAULTS.interface_endpoint_azs)


# ---------------------------------------------------------------------- costs


def test_the_billing_paragraph(template, printed):
    text = readme.passage("**Billing, plainly.**")
    idle = next(line for line in printed if line.startswith("idle cost"))
    assert readme.figure(r"interface endpoints: (\$[\d.]+/h)", text) == re.search(r"(\$[\d.]+)/hour", idle).group(1) + "/h"
    busy = [("system", DEFAULTS.system_instance_type, DEFAULTS.system_node_count),
            ("gpu-worker", DEFAULTS.gpu_instance_type, DEFAULTS.gpu_node_count)]
    assert readme.number(r"instead \(\$([\d.]+)/h\)", text) == dollars(
        still_billed(busy, DEFAULTS.nat_gateways, DEFAULTS.interface_endpoint_azs))
    assert readme.number(r"TTL \((\d+) min", text) == DEFAULTS.training.ttl_seconds_after_finished / 60
    assert readme.number(r"scale-down delay \((\d+) min\)", text) == DEFAULTS.gpu_scale_down_delay_minutes
    assert readme.number(r"\(`log_retention_days`, (\d+)\)", text) == DEFAULTS.log_retention_days
    [bucket] = resources_of(template, "AWS::S3::Bucket").values()
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    noncurrent = {r["NoncurrentVersionExpiration"]["NoncurrentDays"] for r in rules if "NoncurrentVersionExpiration" in r}
    aborted = {r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] for r in rules if "AbortIncompleteMultipartUpload" in r}
    assert {readme.number(r"expire after (\d+) days", text)} == noncurrent
    assert {readme.number(r"abandoned multipart uploads after (\d+)", text)} == aborted


def test_the_checkpoint_size_is_the_one_measured():
    """Qwen2.5-1.5B's checkpoint as DCP wrote it on the H200 (docs/bench-results/sft-checkpoint-*.json): fp32 weights
    and AdamW's two moments, 12 bytes x 1.54e9 parameters, plus the tied embedding's weight saved under both names."""
    measured = {row["bytes"] for path in (ROOT / "docs/bench-results").glob("sft-checkpoint-*.json")
                for row in json.loads(path.read_text())["rows"]}
    sizes = {round(b / 1e9, 1) for b in measured}
    assert len(sizes) == 1 and abs(next(iter(sizes)) * 1e9 - (12 * QWEN.params + 4 * QWEN.vocab * QWEN.hidden)) < 0.05e9
    documented = re.findall(r"(?:checkpoints of about|Qwen2.5-1.5B's) ([\d.]+) GB", readme.text())
    assert len(documented) == 2 and {float(d) for d in documented} == sizes


def test_the_stop_line_names_the_grace_period_of_the_gpu_worker_pods(template, printed):
    """Kubernetes gives a pod the terminationGracePeriodSeconds of its own spec, 30 s where it sets none (the head's
    case): the stop line names what the GPU worker pods, those a drain stops mid-save, get."""
    from tools.seams import kube
    from tools.seams.cfn import Resolver

    [job] = [obj for _, obj, _ in kube.manifests(Resolver(template.to_json(), "us-east-2")) if obj["kind"] == "RayJob"]
    cluster = job["spec"]["rayClusterSpec"]
    worker_grace = cluster["workerGroupSpecs"][0]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert "terminationGracePeriodSeconds" not in cluster["headGroupSpec"]["template"]["spec"] and worker_grace != 30
    [line] = [line for line in printed if line.lstrip().startswith("stop: ")]
    assert line.endswith(f"; the worker pods get {worker_grace} s")


def test_the_image_pull_trade(template):
    """The NAT's pulls against the cache, at one job a day (us-east-2 list prices; ECR storage $0.10/GB-month,
    Amazon ECR pricing)."""
    text = readme.passage("**Image pulls: the NAT or a pull-through cache.**")
    nodes = DEFAULTS.gpu_node_count
    pulls = review.image_pull_usd(nodes)
    assert readme.number(r"bills \$([\d.]+) per GB", text) == review.NAT_GATEWAY_USD_PER_GB
    assert readme.number(r"= ([\d.]+) GB, ", text) == round(nodes * review.RAY_IMAGE_GIB * review.GB_PER_GIB, 1)
    assert readme.number(r"GB, ~\$([\d.]+) per job start", text) == round(pulls, 2)
    rows = {cells[0]: cells[1] for cells in (line.strip("|").split("|") for line in readme.text().splitlines()
                                             if line.startswith("| ") and "per day" not in line) if len(cells) == 2}
    endpoints = review.interface_endpoint_azs(template.to_json()) * review.INTERFACE_ENDPOINT_USD_PER_AZ_HOUR * 24
    storage = review.RAY_IMAGE_GIB * review.GB_PER_GIB * 0.10 / 30
    table = {key.strip(): value.strip() for key, value in rows.items()}
    assert table["NAT processing of the pulls (2 x 12 GiB x $0.045/GB)"] == f"${pulls:.2f}"
    assert table["2 interface endpoints x 1 AZ x 24 h x $0.01 (AWS PrivateLink pricing)"] == f"${endpoints:.2f}"
    assert table["ECR storage of the cached image (12 GiB x $0.10/GB-month / 30)"] == f"~${storage:.2f}"
    trade = readme.passage("The cache costs ~$")
    cache = round(endpoints, 2) + round(storage, 2)
    assert readme.number(r"The cache costs ~\$([\d.]+)/day", trade) == round(cache, 2)
    assert readme.number(r"against \$([\d.]+),", trade) == round(pulls, 2)
    assert readme.number(r"\(([\d.]+) a day\)", trade) == round(cache / pulls, 2)
    assert readme.number(r"in both AZs the endpoints would cost \$([\d.]+)/day", trade) == round(2 * endpoints, 2)


def test_the_review_prices_the_caches_first_pull_through_the_nat(printed):
    per_run = next(line for line in printed if line.startswith("per run: "))
    assert f"a tag's first pull needs the NAT, ECR User Guide: up to ~${review.image_pull_usd(1):.2f} once" in per_run


def test_the_reviews_assumptions_and_the_configmaps_limits():
    from cdk_constructs.ray_manifests import TRAINER_ARCHIVE_PATH
    from cdk_constructs.trainer_archive import ANNOTATIONS_BUDGET_BYTES, ANNOTATIONS_LIMIT_BYTES

    assumed = readme.passage("The per-run and first-step figures rest on two assumptions")
    assert readme.number(r"in about (\d+) minutes", assumed) == review.GPU_NODE_BOOT_S / 60
    assert readme.number(r"\(assumed (\d+) GiB compressed", assumed) == review.RAY_IMAGE_GIB
    assert readme.number(r"at about (\d+) MiB/s", assumed) == review.IMAGE_PULL_MIB_S
    configmap = readme.passage("The ConfigMap line is what `kubectl apply`")
    assert readme.number(r"caps at ([\d,]+) bytes", configmap) == ANNOTATIONS_LIMIT_BYTES
    assert readme.number(r"Synth refuses above (\d+)% of that", configmap) / 100 == ANNOTATIONS_BUDGET_BYTES / ANNOTATIONS_LIMIT_BYTES
    assert f"`{TRAINER_ARCHIVE_PATH}`" in configmap


def test_the_instance_types_profiles_and_shuffle_window():
    from training.config import GPU_PROFILES
    from training.data_plan import SHUFFLE_WINDOW_BLOCKS

    listed = readme.figure(r"EFA interfaces, price\): ([\w., ]+)\.", readme.passage("GPU instance types come from"))
    assert sorted(listed.split(", ")) == sorted(n for n, spec in INSTANCE_TYPES.items() if spec.gpus and spec.supports_efa)
    profiles = readme.passage("GPU profiles set the measured-fast settings per GPU class")
    h200, l4 = GPU_PROFILES["h200"], GPU_PROFILES["l4"]
    assert readme.figure(r"`--profile h200` \((\d+ x \d+), no recomputation", profiles) == f"{h200['micro_batch']} x {h200['seq_len']}"
    assert h200["activation_checkpointing"] == "none"
    assert readme.figure(r"`--profile l4` \((\d+ x \d+ x \d+) accumulation with (\w+) recomputation", profiles) == \
        f"{l4['micro_batch']} x {l4['seq_len']} x {l4['grad_accum']}"
    assert readme.figure(r"accumulation with (\w+) recomputation", profiles) == l4["activation_checkpointing"]
    order = readme.passage("**Order**")
    assert readme.number(r"within windows of (\d+) blocks", order) == SHUFFLE_WINDOW_BLOCKS
    assert readme.figure(r"cdk deploy \(VPC, EKS ([\d.]+), a system node", readme.text()) == DEFAULTS.kubernetes_version


# ---------------------------------------------------------------------- capacity and retries


def test_a_job_without_capacity_fails_after_its_pre_running_deadlines():
    text = readme.passage("**No GPU capacity.**")
    t = DEFAULTS.training
    assert readme.number(r"`training.pre_running_deadline_seconds` \(([\d,]+) s\)", text) == t.pre_running_deadline_seconds
    assert readme.number(r"`training.backoff_limit` \((\d+)\) times", text) == t.backoff_limit
    attempts, minutes = re.search(r"after about (\d+) x (\d+) min", text).groups()
    assert (int(attempts), int(minutes)) == (t.backoff_limit + 1, t.pre_running_deadline_seconds // 60)
    assert "`-c training.rerun=<n>`" in text and "activeDeadlineSeconds" not in text


def test_retries_and_the_partial_capacity_wait():
    t = DEFAULTS.training
    retries = readme.passage("restarts the worker group up to")
    assert readme.number(r"`training.max_failures` \((\d+)\)", retries) == t.max_failures
    starts = readme.passage("So one deploy starts the trainer at most")
    assert readme.number(r"= (\d+) times", starts) == (t.backoff_limit + 1) * (t.max_failures + 1)
    partial = readme.passage("**Partial capacity: preRunningDeadlineSeconds.**")
    assert readme.number(r"`training.pre_running_deadline_seconds` \(([\d,]+) s\)", partial) == t.pre_running_deadline_seconds
    assert readme.number(r"join \(~(\d+) min\)", partial) == review.GPU_NODE_BOOT_S / 60
    assert readme.number(r"pulling the ~(\d+) GiB image", partial) == review.RAY_IMAGE_GIB
    pull_min = review.RAY_IMAGE_GIB * 1024 / review.IMAGE_PULL_MIB_S / 60
    assert readme.number(r"\(~([\d.]+) min at the assumed", partial) == round(pull_min, 1)
    assert readme.number(r"at the assumed (\d+) MiB/s", partial) == review.IMAGE_PULL_MIB_S
    assert readme.number(r"~(\d+) min at 40 MiB/s", partial) == round(review.RAY_IMAGE_GIB * 1024 / 40 / 60)


def test_what_cdk_deploy_creates(template):
    text = readme.passage("## What `cdk deploy` creates in the cluster") + " " + readme.passage("In order, each step")
    charts = {c["Properties"]["Chart"]: c["Properties"] for c in resources_of(template, "Custom::AWSCDK-EKS-HelmChart").values()}
    autoscaler_tag = json.loads(charts["cluster-autoscaler"]["Values"])["image"]["tag"]
    assert readme.figure(r"Cluster Autoscaler \(chart ([\d.]+) with", text) == charts["cluster-autoscaler"]["Version"]
    assert "v" + readme.figure(r"with the ([\d.]+) autoscaler\)", text) == autoscaler_tag
    assert readme.figure(r"NVIDIA device plugin \(([\d.]+)\)", text) == charts["nvidia-device-plugin"]["Version"]
    assert readme.figure(r"EFA device plugin \((v[\d.]+),", text) == charts["aws-efa-k8s-device-plugin"]["Version"]
    assert readme.figure(r"KubeRay operator \(([\d.]+)\)", text) == charts["kuberay-operator"]["Version"]
    spec = INSTANCE_TYPES[DEFAULTS.gpu_instance_type]
    pod = worker_pod_resources(spec)
    assert re.search(rf"\({spec.gpus} GPUs, {spec.efa_interfaces} EFA, {pod['cpu']} CPU, {pod['memory_gib']}Gi on "
                     rf"{spec.name}\)", text)


def test_resuming_on_one_node_doubles_the_micro_batch():
    text = readme.passage("**Resuming a deployed run on fewer nodes**")
    two, one = planned(), planned(gpu_node_count=1)
    gpus = DEFAULTS.training_workers
    assert readme.figure(r"reshards from (\d+) GPUs onto \d+", text) == str(gpus)
    assert readme.figure(r"reshards from \d+ GPUs onto (\d+)", text) == str(gpus // 2)
    assert readme.figure(r"auto doubles its micro-batch, (\d+ to \d+)\)", text) == f"{two['micro_batch']} to {one['micro_batch']}"
    # The same global batch: each GPU's sequences per step double and the accumulation stays one.
    per_gpu = {n: DEFAULTS.training.batch_tokens // (w * DEFAULTS.training.seq_len) for n, w in ((2, gpus), (1, gpus // 2))}
    assert (per_gpu[2], per_gpu[1]) == (two["micro_batch"], one["micro_batch"])


# ---------------------------------------------------------------------- the trainer's guards


def test_the_health_gate_thresholds():
    from training import health
    from training.gpus import gpu_for_device_name

    text = readme.passage("**Health gate**") + " " + readme.passage("each GPU runs a") + " " + readme.passage(
        "each pair of nodes times")
    l4 = gpu_for_device_name("NVIDIA L4")
    assert readme.number(r"within (\d+) s", text) == health.BUDGET_S
    assert readme.number(r"a (\d+)\^3 bf16 matmul", text) == health.MATMUL_N
    assert readme.figure(r"\(L4: ([\d.]+ x [\d.]+ =\s+[\d.]+) TFLOP/s\)", text) == \
        f"{health.MIN_SHARE} x {l4.bf16_tflops:g} = {health.MIN_SHARE * l4.bf16_tflops:g}"
    assert readme.figure(r"at least ([\d.]+) x the datasheet's \(L4: ([\d.]+) GB\)", text) == f"{health.MEMORY_SHARE}"
    assert readme.number(r"\(L4: ([\d.]+) GB\)", text) == round(health.MEMORY_SHARE * l4.memory_gb, 1)
    assert readme.number(r"(\d+)% of it free", text) == round(health.FREE_SHARE * 100)
    assert readme.number(r"a (\d+) MiB write/read", text) * 2**20 == health.PATTERN_BYTES
    assert readme.number(r"\(Qwen2.5-1.5B:\s+([\d.]+) MB\)", text) == round(QWEN.layer_params / QWEN.layers * 2 / 1e6, 1)
    link = planned()["predicted_link_gbps"]
    assert readme.number(r"which the synth passes: ([\d.]+) GB/s", text) == round(link, 1)
    assert readme.number(r"so ([\d.]+) GB/s\)", text) == round(health.MIN_SHARE * link, 2)


def test_the_hang_watchdog_and_the_measured_bill():
    from tools import bill
    from training import watchdog

    text = readme.passage("**Hang watchdog**")
    assert readme.number(r"max\((\d+) x the planned step time", text) == watchdog.STEP_FACTOR
    assert readme.number(r"from the synth\), (\d+) s\) per step", text) == watchdog.FLOOR_S
    assert readme.number(r"and ([\d,]+) s for the first step", text) == watchdog.LONG_S
    assert readme.figure(r"`(TORCH_FR_BUFFER_SIZE=\d+)`", text) == "TORCH_FR_BUFFER_SIZE=" + watchdog.WORKER_ENV["TORCH_FR_BUFFER_SIZE"]
    assert readme.number(r"waits (\d+) s", text) == watchdog.EXIT_GRACE_S
    assert readme.number(r"exits (\d+),", text) == watchdog.EXIT_CODE
    measured = readme.passage("**The bill, measured**")
    assert readme.number(r"with a (\d+) s minimum", measured) == bill.MINIMUM_BILLED_S


def test_the_memlock_facts_are_the_harness_and_the_launch_templates():
    from cdk_constructs.node_groups import MEMLOCK_DROP_IN
    from tools.seams import node

    defaults = readme.passage("default (8 MiB since Linux 5.16")
    assert readme.number(r"expect (\d+) MiB unless", defaults) * 2**20 == node.AL2023_MEMLOCK
    nofile = readme.passage("nodeadm's default OCI base spec")
    assert readme.figure(r"RLIMIT_NOFILE \((\d+:\d+)\)", nofile) == "{}:{}".format(*node.AL2023_NOFILE)
    assert f"`{MEMLOCK_DROP_IN}`" in readme.passage("The fix, applied by the GPU node group's launch template")


# ---------------------------------------------------------------------- the planner's figures


def test_the_speed_section_figures_are_the_planners():
    profile = plan_output("--instance-type", "g6.12xlarge", "--nodes", "2", "--profile", "l4", "--micro-batch", "1",
                          "--activation-checkpointing", "full")
    fp32 = plan_output("--instance-type", "g6.12xlarge", "--nodes", "2", "--profile", "l4", "--micro-batch", "1",
                       "--activation-checkpointing", "full", "--reduce-dtype", "fp32")
    rows = {r[0]: r for r in (line.strip("|").replace(" ", "").split("|") for line in fp32.splitlines() if line.startswith("| "))}
    hybrid, full = float(rows["hybrid"][6].replace(",", "")), float(rows["full"][6].replace(",", ""))
    layouts = readme.passage("`training.sharding=auto` (default) picks")
    assert readme.number(r"predicted ([\d.]+)x full", layouts) == round(hybrid / full, 1)
    assert readme.number(r"full sharding's ([\d,]+) tokens/s", layouts) == full
    shapes = readme.passage("`training.micro_batch=auto` and `training.activation_checkpointing=auto` (defaults)")
    assert readme.number(r"~([\d.]+) s a step against", shapes) == round(planned()["predicted_step_seconds"], 2)
    assert readme.number(r"against ~([\d.]+) s for the l4 profile's", shapes) == float(
        re.search(r"^\| hybrid\+bf16 \| ([\d.]+) \|", profile, re.M).group(1))
    auto = planned_trainer_options(settings_from_context(base_context()))[1]
    assert readme.number(r"Without recomputation it would need ([\d.]+) GiB", shapes) == float(
        re.search(r"no recomputation \(~[\d.]+ s/step, ([\d.]+) GiB/GPU\)", auto).group(1))
    selective = planned_trainer_options(settings_from_context(base_context() | {"training.activation_checkpointing": "selective"}))[1]
    step, memory = re.search(r"selective recomputation \(~([\d.]+) s/step, ([\d.]+) GiB/GPU\)$", selective).groups()
    usable = re.search(r"of ([\d.]+) GiB/GPU", auto).group(1)
    assert readme.figure(r"selective recomputation \(~([\d.]+) s\) needs", shapes) == step
    assert readme.figure(r"needs ([\d.]+ of the L4's [\d.]+) usable GiB", shapes) == f"{memory} of the L4's {usable}"
    # The settings the README says give that layout give it; the recomputation alone gives what it says instead.
    given = dict(re.findall(r"-c training\.(\w+)=(\w+)", figure_sentence(shapes, "does; with the recomputation alone")))
    assert set(given) == {"activation_checkpointing", "micro_batch", "sharding"}
    assert round(planned(**{f"training.{k}": v for k, v in given.items()})["predicted_step_seconds"], 2) == float(step)
    alone = planned(**{"training.activation_checkpointing": "selective"})
    assert readme.figure(r"resolves (\w+\+bf16) at ~", shapes) == f"{alone['sharding']}+bf16"
    assert readme.number(r"resolves \w+\+bf16 at ~([\d.]+) s\)", shapes) == round(alone["predicted_step_seconds"], 2)
    batch = readme.passage("`training.batch_tokens` (65,536) is the batch")
    t = DEFAULTS.training
    assert readme.figure(r"\(([\d,]+ / \(\d+ GPUs x [\d,]+\) = \d+)\)", batch) == \
        f"{t.batch_tokens:,} / ({DEFAULTS.training_workers} GPUs x {t.seq_len:,}) = {t.batch_tokens // (DEFAULTS.training_workers * t.seq_len)}"
    basis = re.search(r"gives ([\d.]+) s \+ ([\d.]+) s per step", profile).groups()
    kernels = readme.passage("An L4's")
    assert readme.number(r"An L4's (\d+) GB/s", kernels) == INSTANCE_TYPES["g6.12xlarge"].gpu.memory_bandwidth_gbps
    assert readme.figure(r"memory-bound kernels\s+([\d.]+) s of a", kernels) == basis[1]
    assert readme.number(r"of a ([\d.]+) s step at the l4 profile", kernels) == round(float(basis[0]) + float(basis[1]), 2)


def figure_sentence(text: str, anchor: str) -> str:
    """The parenthesis of `text` that holds `anchor`."""
    found = [part for part in re.findall(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text) if anchor in part]
    assert found, f"README: no parenthesis with {anchor!r} in: {text[:300]}"
    return found[0]


def test_the_lora_estimates_are_the_planners():
    text = readme.passage("For models full fine-tuning cannot fit")
    documented = [float(g) for g in re.search(r"need LoRA \(([\d.]+) and ([\d.]+)\s+GiB per GPU at rank (\d+)\)",
                                                text).groups()]
    estimates = []
    for model in ("qwen2.5-7b", "qwen2.5-14b"):
        out = plan_output("--instance-type", "g6.12xlarge", "--nodes", "2", "--profile", "l4", "--model", model)
        estimates.append(float(re.search(rf"LoRA fits \(--lora-rank {int(documented[2])}: .*\(([\d.]+) GiB/GPU of", out).group(1)))
    assert documented[:2] == estimates


def test_the_export_sizes_are_the_models_parameters_in_bf16_and_fp32():
    text = readme.passage("**Exports**")
    bf16, fp32 = re.search(r"Qwen2.5-1.5B: ([\d.]+) GB against ([\d.]+) GB in fp32", text).groups()
    assert (float(bf16), float(fp32)) == (round(2 * QWEN.params / 1e9, 2), round(4 * QWEN.params / 1e9, 2))
    trainer = readme.passage("-token logits never exist whole")
    assert readme.number(r"so the ([\d,]+)-token logits", trainer) == QWEN.vocab


def test_the_auto_margin_and_the_models_the_planner_cannot_size():
    from planning.search import AUTO_MEMORY_MARGIN

    assert readme.number(r"fits in memory with (\d+)% of it free", readme.passage("**auto** (`--micro-batch auto`")) == \
        round(AUTO_MEMORY_MARGIN * 100)
    text = readme.passage("one it cannot read there")
    named = re.findall(r"`(training\.\w+)` \(", text)
    values = {"training.micro_batch": 4, "training.activation_checkpointing": "full", "training.sharding": "hybrid"}
    assert set(named) == set(values)
    pod_path = {"training.model": "/models/not-on-this-machine"}
    settings_from_context(base_context() | pod_path | {k: values[k] for k in named})  # what README says is enough
    for left_out in named:
        with pytest.raises(SettingsError, match=r"^training.model: cannot read"):
            settings_from_context(base_context() | pod_path | {k: values[k] for k in named if k != left_out})


# ---------------------------------------------------------------------- names that must exist


OUR_FOLDERS = ("training", "planning", "benchmarks", "cdk_constructs", "stacks", "tools", "tests", "docs")
NOT_PATHS = {"training/ray"}
"""Names that look like paths and are not: the Ray pods' namespace/service account."""


def named(text: str) -> set[str]:
    """The repository's files and folders, `python -m` modules and `make` targets that `text` names."""
    paths = set(re.findall(rf"(?<![\w/.<-])((?:{'|'.join(OUR_FOLDERS)})/[\w./-]*[\w/])", text))
    modules = {m for m in re.findall(r"python -m ([\w.]+)", text) if m.split(".")[0] in OUR_FOLDERS}
    targets = set(re.findall(r"`make ([\w-]+)", text)) | set(re.findall(r"^make ([\w-]+)", text, re.M))
    return paths | {f"python -m {m}" for m in modules} | {f"make {t}" for t in targets}


def missing(names: set[str]) -> list[str]:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))

    def exists(name: str) -> bool:
        if name.startswith("make "):
            return name.removeprefix("make ") in targets
        if name.startswith("python -m "):
            module = ROOT / name.removeprefix("python -m ").replace(".", "/")
            return module.with_suffix(".py").exists() or (module / "__init__.py").exists()
        return (ROOT / name).exists() or (ROOT / f"{name}.py").exists()  # a module as the review lists it
    return sorted(name for name in names - NOT_PATHS if not exists(name))


def test_every_path_module_and_make_target_named_in_the_readme_exists():
    names = named(readme.text())
    assert len([n for n in names if "/" in n]) > 20 and missing(names) == []


def test_a_dead_path_module_or_target_is_found():
    text = ("`tests/test_node_bootstrap.py` decodes it; `tests/infra/test_node_bootstrap.py` too; "
            "python -m tools.nosuch and python -m tools.watch; `make nosuch`, `make synth`")
    assert missing(named(text)) == ["make nosuch", "python -m tools.nosuch", "tests/test_node_bootstrap.py"]
