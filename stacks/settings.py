"""The app's one settings object: read from cdk.json context and `-c key=value`, validated here.

Every field is a context key of the same name. `-c` values arrive as strings and are parsed
to the field's type; cdk.json values arrive as JSON. Every refusal is a SettingsError whose
message is one line naming the key and what is allowed. Training settings that are trainer
options say so in their field metadata: `trainer_options` turns them into the RayJob's options,
and validation runs the trainer's own checks on them (one source of truth for what it accepts).
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import re
import shlex
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from cdk_constructs.cluster import KUBECTL_LAYERS
from cdk_constructs.instance_types import INSTANCE_TYPES
from cdk_constructs.log_groups import RETENTION_DAYS
from training.config import GPU_PROFILES

# The cluster trains on L4s (g6.12xlarge) by default: the trainer's l4 profile's sequence length, compile and
# loss chunk; the micro-batch and recomputation are auto (training.plan's fastest that fits).
_L4 = GPU_PROFILES["l4"]

# EKS can create these minor versions (late 2026; 1.29 and 1.30 left extended support).
EKS_CREATABLE_VERSIONS = ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
EKS_RETIRED_VERSIONS = {
    "1.29": "extended support ended 2026-03-23",
    "1.30": "extended support ended 2026-07-23",
}

ENDPOINT_ACCESS_MODES = ("public", "private", "public_and_private")
PLACEMENT_GROUP_MODES = ("auto", "on", "off")
# AWS tag rules (Tagging AWS resources, "Tag naming limits and requirements").
MAX_TAGS = 50
_TAG_SYMBOLS = set(" _.:/=+-@")
# Ranges AWS refuses for a VPC: this-network, loopback, link-local, multicast and reserved.
_FORBIDDEN_VPC_RANGES = tuple(ipaddress.IPv4Network(c) for c in
                              ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"))
MAX_AVAILABILITY_ZONES = 6
# EKS User Guide, "Amazon EKS service quotas": public endpoint access CIDR ranges per cluster, 40, not adjustable.
MAX_PUBLIC_ENDPOINT_CIDRS = 40


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one line for the user."""


def _trainer(option: str | None = None) -> dict:
    """Field metadata: this setting is the trainer's --option of the same name, or of `option`."""
    return {"trainer_option": option}


@dataclass(frozen=True)
class TrainingSettings:
    """What the RayJob that `cdk deploy` starts will train."""

    model: str = field(default="Qwen/Qwen2.5-1.5B", metadata=_trainer())
    """Hub id, local or s3:// path, or a built-in config (qwen2.5-1.5b, tiny) with random init."""
    model_revision: str | None = field(default=None, metadata=_trainer())
    """Hub revision (a commit hash pins the exact weights and tokenizer); synth warns when a hub model has none."""
    steps: int = field(default=200, metadata=_trainer())
    """Optimizer steps."""
    seq_len: int = field(default=_L4["seq_len"], metadata=_trainer())
    """Tokens per sequence."""
    micro_batch: int | str = field(default="auto", metadata=_trainer())
    """Sequences per GPU per forward pass, or auto: training.plan picks it (see activation_checkpointing)."""
    batch_tokens: int = field(default=65_536, metadata=_trainer())
    """Tokens per optimizer step over all GPUs: the batch the optimisation sees. Each GPU's accumulation
    is derived from it (batch_tokens / (GPUs x micro_batch x seq_len); by default 8 GPUs x 4 sequences of
    2048, which auto runs as one micro-batch of 4), so changing gpu_node_count keeps the optimisation; a batch
    the GPUs cannot split evenly is refused."""
    learning_rate: float = field(default=2e-5, metadata=_trainer("lr"))
    """Peak learning rate after warmup."""
    data: str = field(default="random", metadata=_trainer())
    """random (token ids: throughput and transport), pattern, hf:org/name[:split] (a Hub dataset, read
    through the NAT), or JSONL/Parquet at s3://... or a pod path."""
    text_field: str = field(default="text", metadata=_trainer())
    """Field of plain-text records (every token is learned)."""
    messages_field: str = field(default="messages", metadata=_trainer())
    """Field of chat records: a list of {role, content}, rendered with the tokenizer's chat template."""
    prompt_field: str | None = field(default=None, metadata=_trainer())
    """Instruction data: the user turn's field(s), comma-separated; with response_field."""
    response_field: str | None = field(default=None, metadata=_trainer())
    """Instruction data: the assistant reply's field; with prompt_field."""
    assistant_only_loss: bool = field(default=True, metadata=_trainer())
    """Chat: learn the assistant turns only (false: every token)."""
    chat_template: str | None = field(default=None, metadata=_trainer())
    """Chat: a template instead of the tokenizer's (also saved with the export): an s3:// or absolute pod
    path to a .jinja file, or a Hub model id whose tokenizer's template to take."""
    default_system_prompt: bool = field(default=True, metadata=_trainer())
    """Chat: false gives chats without a system turn an empty one where the template would write its own
    default text (Qwen2.5's 'You are Qwen, ...')."""
    shuffle: bool = field(default=True, metadata=_trainer())
    """Shuffle records across files and blocks each epoch, seeded (false: file order, for curricula)."""
    val_data: str | None = field(default=None, metadata=_trainer())
    """Validation data in any `data` form (e.g. hf:org/name:test); or use val_fraction."""
    val_fraction: float = field(default=0.0, metadata=_trainer())
    """Hold out this fraction of the documents of `data` for validation (0 to 0.5)."""
    eval_every: int = field(default=0, metadata=_trainer())
    """Steps between validation passes (0: only at the end); needs val_data or val_fraction."""
    activation_checkpointing: str | bool = field(default="auto", metadata=_trainer())
    """Which decoder layers recompute their forward in backward: none, selective (every second layer: half the
    activation memory and half the extra compute of full), full (every layer: least memory, about 1/3 more
    compute), or auto. true and false, the old boolean form, still mean full and none.
    auto, here and for micro_batch: for the GPU type, node count and model (a built-in or its hub id), the trainer
    takes training.plan's fastest layout (with sharding auto), micro-batch and recomputation that fits in memory,
    ties going to the least memory. The micro-batch divides each GPU's sequences per step (batch_tokens / (GPUs x
    seq_len)), so the batch and the optimisation stay as set. Synth prints the pick and why (the trainer logs the
    same line), and refuses in one line, naming the setting to change, when nothing fits; a model of unknown shape
    needs values instead of auto."""
    compile: bool = field(default=_L4["compile"], metadata=_trainer())
    """torch.compile each decoder layer (about 1.26x the tokens/s on H200; docs/benchmarks.md)."""
    sharding: str = field(default="auto", metadata=_trainer())
    """full, hybrid (shard within a node, replicate across nodes), or auto: what training.plan says is
    fastest and fits for these nodes (hybrid on 2 x g6.12xlarge; docs/benchmarks.md)."""
    reduce_dtype: str = field(default="bf16", metadata=_trainer())
    """Gradient reduction dtype: bf16 halves the bytes on the one EFA link (+52% tokens/s predicted on
    2 x g6.12xlarge; the loss curve kept fp32's in the 62-step comparison, docs/benchmarks.md), or fp32."""
    precision: str = field(default="bf16", metadata=_trainer())
    """Matmul precision of the decoder layers: bf16, or fp8 (torchao float8; needs FP8 tensor cores: g6, g6e, p5,
    not g5 or p4d; full fine-tuning only). Off by default until its speed and loss parity are measured
    (docs/benchmarks.md)."""
    reshard_after_forward: bool = field(default=True, metadata=_trainer())
    """False keeps each layer's weights gathered through a step's micro-batches: one all-gather per
    step instead of two per micro-batch over EFA, for about 9 GB more per GPU (fits L4s at 8 workers;
    ran out of memory at 2 under a 22 GiB cap; docs/benchmarks.md)."""
    loss_chunk_tokens: int = field(default=_L4["loss_chunk_tokens"], metadata=_trainer())
    """Tokens per chunk of the fused LM head + loss; its bf16 logits take chunk x vocab x 2 bytes."""
    checkpoint_every: int = field(default=50, metadata=_trainer())
    """Steps between sharded checkpoints in the bucket (0: only at the end)."""
    async_checkpoint: bool = field(default=True, metadata=_trainer())
    """Write checkpoints in the background: training pauses only to copy the shards to CPU memory."""
    max_failures: int = field(default=3, metadata=_trainer())
    """Worker-group restarts Ray Train may make from the last checkpoint (the retries of training)."""
    require_efa: bool = field(default=True, metadata=_trainer())
    """Fail the job in its first minute when inter-node NCCL traffic is not on EFA, or cannot be verified."""
    image: str = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
    """Container image of the Ray head and workers (Ray 2.58, PyTorch 2.13, EFA, aws-ofi-nccl)."""
    ray_version: str = "2.58.0"
    """Ray version in the image; KubeRay needs it for token authentication (2.52.0 or later)."""
    hf_token_secret: str | None = None
    """Kubernetes Secret (in the training namespace, key `token`) whose value becomes HF_TOKEN in the
    Ray pods, for gated models; the value never appears in the template. Create it after the namespace."""
    active_deadline_seconds: int = 4 * 3600
    """KubeRay fails the RayJob after this long (no retry: backoff_limit skips DeadlineExceeded); its
    RayCluster then goes after ttl_seconds_after_finished, and the GPU nodes after the scale-down delay."""
    backoff_limit: int = 1
    """Retries of the whole job, each on a fresh RayCluster (the RayJob's spec.backoffLimit); each retry
    resumes from the run's newest checkpoint. Retries inside one cluster are max_failures."""
    submitter_backoff_limit: int = 2
    """Retries of the submitter pod that runs `ray job submit` (the RayJob's submitterConfig.backoffLimit)."""
    ttl_seconds_after_finished: int = 300
    """Seconds the finished job's RayCluster (and so its GPU nodes) stays for reading logs before KubeRay deletes it."""
    rerun: int = 0
    """Train the same settings again from the start: a new number is a new run folder and a new RayJob."""
    checkpoint_bucket_auto_delete: bool = False
    """Delete the checkpoint bucket and its objects on `cdk destroy` (default: retain it)."""


@dataclass(frozen=True)
class Settings:
    """Everything the app builds is decided here; defaults reproduce the reference deployment."""

    stack_name: str = "EksFsdpEfa"
    """CloudFormation stack name; also the EKS cluster's name."""
    account: str | None = None
    """12-digit AWS account id; None deploys to the account of the caller's credentials."""
    region: str = "us-east-2"
    """AWS region."""
    availability_zones: tuple[str, ...] = ("us-east-2a", "us-east-2b")
    """AZs of the VPC (two to six, EKS needs two); kept here so synth does no lookup."""
    gpu_availability_zone: str = "us-east-2a"
    """The one AZ of the GPU nodes (EFA traffic does not cross AZs); one of availability_zones."""
    vpc_cidr: str = "10.0.0.0/16"
    """VPC IPv4 range, /16 to /20; each AZ's private subnet gets an eighth of it (pods take VPC addresses)."""
    nat_gateways: int = 1
    """NAT gateways (1 to one per AZ); more survive an AZ outage and cost more."""
    kubernetes_version: str = "1.36"
    """EKS Kubernetes minor version; the kubectl layer must match it."""
    endpoint_access: str = "public_and_private"
    """EKS API endpoint: public, private or public_and_private."""
    endpoint_public_cidrs: tuple[str, ...] | None = None
    """CIDRs allowed to reach a public endpoint. Unset: `make deploy` and `make diff` use your egress
    address (<ip>/32, from AWS's checkip service); a plain `cdk deploy` leaves it open to 0.0.0.0/0,
    with a warning. 0.0.0.0/0 may be set on purpose (IAM still authenticates every request)."""
    admin_principal_arn: str | None = None
    """IAM role or user ARN given cluster-admin through an EKS access entry. An STS assumed-role
    ARN (what `aws sts get-caller-identity` prints) is converted to its role's ARN; `make deploy`
    fills in the caller's own when this is unset."""
    system_instance_type: str = "m7i.xlarge"
    """Instance type of the CPU system nodes (KubeRay operator, Ray head, CoreDNS)."""
    system_node_count: int = 1
    """Number of system nodes."""
    system_node_disk_gib: int = 80
    """Encrypted gp3 root volume of each system node: it pulls the multi-GiB Ray image for the head."""
    gpu_instance_type: str = "g6.12xlarge"
    """EFA-capable GPU instance type; must be in cdk_constructs/instance_types.py."""
    gpu_node_count: int = 2
    """Number of GPU nodes, one Ray worker pod each (taking all of the node's GPUs)."""
    gpu_node_disk_gib: int = 200
    """Encrypted gp3 root volume of each GPU node; the training image is large."""
    gpu_scale_to_zero: bool = True
    """GPU nodes start when a job's workers wait for them and stop after it (Cluster Autoscaler, 0 to
    gpu_node_count nodes); false keeps gpu_node_count nodes running from deploy to destroy."""
    gpu_scale_down_delay_minutes: int = 5
    """Minutes a GPU node stays without a Ray worker before the autoscaler removes it."""
    gpu_node_taint: bool = True
    """Taint GPU nodes nvidia.com/gpu=true:NoSchedule so only GPU workloads land there."""
    capacity_reservation_id: str | None = None
    """On-Demand Capacity Reservation to launch the GPU nodes into (cr- and 17 hex digits)."""
    placement_group: str = "auto"
    """Cluster placement group: on, off, or auto (on unless a capacity reservation is set; on with a
    reservation is refused, since a reservation launches only into the group it was made in)."""
    log_retention_days: int = 30
    """Retention of every log group the stack makes: EKS control plane, VPC flow logs, its Lambdas."""
    tags: dict[str, str] = field(default_factory=lambda: {"project": "eks-fsdp-efa"})
    """Tags on every resource."""
    training: TrainingSettings = field(default_factory=TrainingSettings)
    """The training job; context key `training` (an object) or `training.<field>`."""

    @property
    def use_placement_group(self) -> bool:
        if self.placement_group == "auto":
            return self.capacity_reservation_id is None
        return self.placement_group == "on"

    @property
    def eks_cluster_name(self) -> str:
        return self.stack_name

    @property
    def training_workers(self) -> int:
        """Ray Train workers: one per GPU of every GPU node."""
        return self.gpu_node_count * INSTANCE_TYPES[self.gpu_instance_type].gpus


def trainer_options(s: Settings) -> dict[str, typing.Any]:
    """The trainer's options (training/config.py TrainConfig names) of the RayJob: the training
    settings that are trainer options, and the world size. Where runs go is the workload's to add."""
    options = {
        f.metadata["trainer_option"] or f.name: getattr(s.training, f.name)
        for f in dataclasses.fields(TrainingSettings) if "trainer_option" in f.metadata
    }
    return options | {"workers": s.training_workers, "instance_type": s.gpu_instance_type}


def _setting_of_option(option: str) -> str:
    """The setting a trainer --option comes from, to name it in an error."""
    for f in dataclasses.fields(TrainingSettings):
        if "trainer_option" in f.metadata and (f.metadata["trainer_option"] or f.name) == option:
            return f"training.{f.name}"
    return {"workers": "gpu_node_count", "instance_type": "gpu_instance_type"}.get(option, option)


# ---------------------------------------------------------------- parsing


def _parse(key: str, raw: typing.Any, annotation: typing.Any) -> typing.Any:
    """Turn a context value (JSON or a `-c` string) into the field's type."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if len(arms) < len(args) and (raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none", "null"))):
            return None
        for arm in arms:  # the first of the union's types, in order, that the value parses as
            try:
                return _parse(key, raw, arm)
            except SettingsError as error:
                refused = error
        if len(arms) == 1:
            raise refused
        kinds = {int: "an integer", str: "a string", bool: "true or false", float: "a number"}
        raise SettingsError(f"{key}: expected {' or '.join(kinds[a] for a in arms)}, got {raw!r}")
    if annotation is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false", "1", "0", "yes", "no"):
            return raw.lower() in ("true", "1", "yes")
        raise SettingsError(f"{key}: expected true or false, got {raw!r}")
    if annotation is int:
        if isinstance(raw, bool):
            raise SettingsError(f"{key}: expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str) and re.fullmatch(r"-?\d+", raw.strip()):
            return int(raw)
        raise SettingsError(f"{key}: expected an integer, got {raw!r}")
    if annotation is float:
        try:
            if isinstance(raw, bool):
                raise ValueError
            return float(raw)
        except (TypeError, ValueError):
            raise SettingsError(f"{key}: expected a number, got {raw!r}") from None
    if annotation is str:
        if not isinstance(raw, str):
            raise SettingsError(f"{key}: expected a string, got {raw!r}")
        return raw.strip()
    if origin in (tuple, dict):
        value = raw
        if isinstance(raw, str):
            text = raw.strip()
            if origin is tuple and not text.startswith("["):
                value = [part.strip() for part in text.split(",") if part.strip()]
            else:
                try:
                    value = json.loads(text)
                except json.JSONDecodeError:
                    raise SettingsError(f"{key}: expected JSON, got {raw!r}") from None
        if origin is tuple:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SettingsError(f"{key}: expected a list of strings, got {raw!r}")
            return tuple(v.strip() for v in value)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise SettingsError(f"{key}: expected an object of string values, got {raw!r}")
        return dict(value)
    raise TypeError(f"no parser for {annotation!r}")  # a programming error, not user input


def _build(cls: type, values: dict[str, typing.Any], prefix: str = "") -> typing.Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = _build(hints[f.name], values[f.name], f"{prefix}{f.name}.")
        else:
            kwargs[f.name] = _parse(prefix + f.name, values[f.name], hints[f.name])
    return cls(**kwargs)


def settings_from_context(context: typing.Mapping[str, typing.Any]) -> Settings:
    """Build and validate Settings from CDK context (cdk.json merged with `-c`).

    Keys that are not settings are ignored only when CDK owns them (they contain ':' or
    start with 'aws-cdk' / '@aws-cdk'); any other unknown key is a typo and is refused.
    """
    known = {f.name for f in dataclasses.fields(Settings)}
    training_known = {f.name for f in dataclasses.fields(TrainingSettings)}
    values: dict[str, typing.Any] = {}
    training: dict[str, typing.Any] = {}
    for key, raw in context.items():
        if ":" in key or key.startswith(("aws-cdk", "@aws-cdk", "cdk-")) or key == "acknowledged-issue-numbers":
            continue
        if key == "training":
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except json.JSONDecodeError:
                    raise SettingsError(f"training: expected a JSON object, got {raw!r}") from None
            if not isinstance(raw, dict):
                raise SettingsError(f"training: expected an object, got {raw!r}")
            for sub_key, sub_raw in raw.items():
                training.setdefault(sub_key, sub_raw)
        elif key.startswith("training."):
            training[key.removeprefix("training.")] = raw
        elif key in known:
            values[key] = raw
        else:
            raise SettingsError(f"{key}: unknown setting; known settings: {', '.join(sorted(known))}")
    for sub_key in training:
        if sub_key not in training_known:
            raise SettingsError(
                f"training.{sub_key}: unknown setting; known: {', '.join(sorted(training_known))}"
            )
    if training:
        values["training"] = training
    settings = _build(Settings, values)
    validate(settings)
    return settings


def settings_from_files(cdk_json: str | Path = "cdk.json", overrides: typing.Iterable[str] = ()) -> Settings:
    """Settings as `cdk synth` builds them, for tools outside CDK: cdk.json's context, then `-c key=value`."""
    path = Path(cdk_json)
    if not path.is_file():
        raise SettingsError(f"{cdk_json}: no such file (run from the repository root, or pass the app's cdk.json)")
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise SettingsError(f"{cdk_json}: cannot be read: {error}") from None
    except json.JSONDecodeError as error:
        raise SettingsError(f"{cdk_json}: not JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(document, dict) or not isinstance(document.get("context", {}), dict):
        raise SettingsError(f"{cdk_json}: expected a JSON object with a \"context\" object, as cdk.json has")
    context = dict(document.get("context", {}))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"-c {item!r}: expected key=value")
        context[key] = value
    return settings_from_context(context)


# ---------------------------------------------------------------- validation


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SettingsError(message)


def validate(s: Settings) -> None:
    """Every cross-field and range rule, in one place."""
    _require(re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,99}", s.stack_name) is not None,
             f"stack_name: {s.stack_name!r} must start with a letter and hold only letters, digits and '-', "
             "at most 100 characters (it also names the EKS cluster)")
    _require(s.account is None or re.fullmatch(r"\d{12}", s.account) is not None,
             f"account: {s.account!r} must be 12 digits or null")
    _validate_region(s.region)
    _require(2 <= len(s.availability_zones) <= MAX_AVAILABILITY_ZONES
             and len(set(s.availability_zones)) == len(s.availability_zones),
             f"availability_zones: need two to {MAX_AVAILABILITY_ZONES} distinct AZs (EKS requires two), "
             f"got {list(s.availability_zones)}")
    for az in s.availability_zones:
        _require(re.fullmatch(re.escape(s.region) + r"[a-z]", az) is not None,
                 f"availability_zones: {az!r} is not an AZ of region {s.region} (expected {s.region}a, {s.region}b, ...)")
    _require(s.gpu_availability_zone in s.availability_zones,
             f"gpu_availability_zone: {s.gpu_availability_zone!r} must be one of availability_zones {list(s.availability_zones)}")
    _validate_vpc_cidr(s.vpc_cidr)
    _require(1 <= s.nat_gateways <= len(s.availability_zones),
             f"nat_gateways: {s.nat_gateways} must be between 1 and the number of AZs ({len(s.availability_zones)})")
    _validate_kubernetes_version(s.kubernetes_version)
    _require(s.endpoint_access in ENDPOINT_ACCESS_MODES,
             f"endpoint_access: {s.endpoint_access!r} must be one of {', '.join(ENDPOINT_ACCESS_MODES)}")
    if s.endpoint_public_cidrs is not None:
        _require(s.endpoint_access != "private",
                 "endpoint_public_cidrs: a private endpoint has no public CIDRs (unset it, or set endpoint_access=public_and_private)")
        _require(len(s.endpoint_public_cidrs) > 0,
                 "endpoint_public_cidrs: a public endpoint needs at least one CIDR (or set endpoint_access=private)")
        _require(len(s.endpoint_public_cidrs) <= MAX_PUBLIC_ENDPOINT_CIDRS,
                 f"endpoint_public_cidrs: {len(s.endpoint_public_cidrs)} CIDRs; EKS takes at most "
                 f"{MAX_PUBLIC_ENDPOINT_CIDRS} per cluster (a quota that cannot be raised): merge ranges")
        for cidr in s.endpoint_public_cidrs:
            _validate_cidr("endpoint_public_cidrs", cidr, min_prefix=0, max_prefix=32)
    if s.admin_principal_arn is not None:
        principal_arn, _ = access_entry_principal(s.admin_principal_arn)
        partition = principal_arn.split(":")[1]
        _require(partition == region_partition(s.region),
                 f"admin_principal_arn: {s.admin_principal_arn!r} is in partition {partition}, "
                 f"region {s.region} in {region_partition(s.region)}")
    _validate_instance(s)
    _require(1 <= s.system_node_count <= 10, f"system_node_count: {s.system_node_count} must be between 1 and 10")
    _require(50 <= s.system_node_disk_gib <= 16384,
             f"system_node_disk_gib: {s.system_node_disk_gib} must be between 50 and 16384 (the Ray image alone is tens of GiB)")
    _require(1 <= s.gpu_node_count <= 64, f"gpu_node_count: {s.gpu_node_count} must be between 1 and 64")
    _require(1 <= s.gpu_scale_down_delay_minutes <= 1440,
             f"gpu_scale_down_delay_minutes: {s.gpu_scale_down_delay_minutes} must be between 1 and 1440")
    _require(100 <= s.gpu_node_disk_gib <= 16384,
             f"gpu_node_disk_gib: {s.gpu_node_disk_gib} must be between 100 and 16384 (the training image alone is tens of GiB)")
    _require(s.capacity_reservation_id is None
             or re.fullmatch(r"cr-[0-9a-f]{17}", s.capacity_reservation_id) is not None,
             f"capacity_reservation_id: {s.capacity_reservation_id!r} must look like cr-0123456789abcdef0 (cr- and 17 hex digits)")
    _require(s.placement_group in PLACEMENT_GROUP_MODES,
             f"placement_group: {s.placement_group!r} must be one of {', '.join(PLACEMENT_GROUP_MODES)}")
    # EC2 User Guide, "Capacity Reservations for cluster placement groups": a targeted reservation launches
    # into the placement group it was created in; the stack's group is new, so no reservation was.
    _require(not (s.capacity_reservation_id and s.placement_group == "on"),
             "placement_group: on with capacity_reservation_id cannot launch: the stack makes a new cluster placement "
             "group and a reservation launches only into the group it was created in; use auto or off")
    _require(s.log_retention_days in RETENTION_DAYS,
             f"log_retention_days: {s.log_retention_days} is not a CloudWatch retention; allowed: "
             f"{', '.join(map(str, RETENTION_DAYS))}")
    _validate_tags(s.tags)
    _validate_training(s)


def _validate_region(region: str) -> None:
    _require(region_partition(region) is not None,
             f"region: {region!r} is not an AWS region (botocore knows e.g. us-east-1, us-east-2, eu-west-1)")


@functools.lru_cache(maxsize=None)
def region_partition(region: str) -> str | None:
    """The partition (aws, aws-cn, aws-us-gov, ...) of a region botocore knows offline, or None
    (cached: each new botocore session reads its endpoint files again)."""
    import botocore.session

    session = botocore.session.get_session()
    for partition in session.get_available_partitions():
        if region in session.get_available_regions("ec2", partition_name=partition):
            return partition
    return None


def access_entry_principal(arn: str) -> tuple[str, str | None]:
    """(the ARN an EKS access entry takes, a note when it was converted) for an IAM or STS ARN.

    Access entries take IAM roles and users. `aws sts get-caller-identity` prints an assumed-role
    session ARN, which becomes its role's ARN; a session ARN does not carry the role's path, and
    EKS matches the role by its full ARN (path included), so the note says how to give it.
    """
    iam = re.fullmatch(r"arn:(aws[a-z-]*):iam::(\d{12}):(role|user)/([\w+=,.@/-]{1,512})", arn)
    if iam and not iam.group(4).startswith("/") and not iam.group(4).endswith("/"):
        return arn, None
    session = re.fullmatch(r"arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]{1,64})/([\w+=,.@-]{1,64})", arn)
    if session:
        partition, account, role = session.groups()[:3]
        converted = f"arn:{partition}:iam::{account}:role/{role}"
        return converted, (f"admin_principal_arn: the STS session {arn} became {converted}; if the role has a "
                           f"path (IAM Identity Center roles do), give its full ARN: aws iam get-role --role-name {role}")
    kind = re.fullmatch(r"arn:aws[a-z-]*:(?:iam|sts)::\d{12}:([a-z-]+)(?:/.*)?", arn)
    if kind and kind.group(1) in ("federated-user", "root", "group", "assumed-role", "instance-profile", "policy"):
        raise SettingsError(f"admin_principal_arn: {arn!r} is a {kind.group(1)}, which EKS access entries do not "
                            "take; give an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)")
    raise SettingsError(f"admin_principal_arn: {arn!r} must be an IAM role or user ARN "
                        "(arn:aws:iam::<account>:role/<name>) or an STS assumed-role ARN")


def _validate_cidr(key: str, cidr: str, min_prefix: int, max_prefix: int) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError:
        raise SettingsError(f"{key}: {cidr!r} is not an IPv4 CIDR such as 10.0.0.0/16") from None
    _require(min_prefix <= network.prefixlen <= max_prefix,
             f"{key}: {cidr!r} must have a prefix between /{min_prefix} and /{max_prefix}")
    return network


def _validate_vpc_cidr(cidr: str) -> None:
    network = _validate_cidr("vpc_cidr", cidr, min_prefix=16, max_prefix=20)
    _require(not any(network.overlaps(r) for r in _FORBIDDEN_VPC_RANGES),
             f"vpc_cidr: {cidr!r} overlaps a range AWS refuses for VPCs (0/8, 127/8, 169.254/16, 224/4, 240/4); "
             "use a private range such as 10.0.0.0/16")


def _validate_tags(tags: dict[str, str]) -> None:
    _require(len(tags) <= MAX_TAGS, f"tags: {len(tags)} tags; AWS allows at most {MAX_TAGS} per resource")
    for key, value in tags.items():
        _require(0 < len(key) <= 128 and len(value) <= 256,
                 f"tags: {key!r} must be 1-128 characters with a value of at most 256")
        _require(not key.lower().startswith("aws:"), f"tags: {key!r} may not start with 'aws:' (reserved for AWS)")
        for text in (key, value):
            _require(all(c.isalnum() or c in _TAG_SYMBOLS for c in text),
                     f"tags: {text!r} may hold only letters, digits, spaces and _ . : / = + - @")


def _validate_kubernetes_version(version: str) -> None:
    if version in EKS_RETIRED_VERSIONS:
        raise SettingsError(
            f"kubernetes_version: EKS can no longer create {version} ({EKS_RETIRED_VERSIONS[version]}); "
            f"allowed: {', '.join(sorted(KUBECTL_LAYERS))}"
        )
    _require(version in EKS_CREATABLE_VERSIONS,
             f"kubernetes_version: {version!r} is not a version EKS creates; allowed: {', '.join(sorted(KUBECTL_LAYERS))}")
    _require(version in KUBECTL_LAYERS,
             f"kubernetes_version: {version} has no matching kubectl layer installed; "
             f"allowed: {', '.join(sorted(KUBECTL_LAYERS))} (add aws-cdk.lambda-layer-kubectl-v{version.split('.')[1]} to support it)")


def _validate_instance(s: Settings) -> None:
    known = ", ".join(sorted(n for n, spec in INSTANCE_TYPES.items() if spec.supports_efa))
    gpu = INSTANCE_TYPES.get(s.gpu_instance_type)
    _require(gpu is not None, f"gpu_instance_type: {s.gpu_instance_type!r} is not in the instance table; known EFA GPU types: {known}")
    _require(gpu.gpus > 0, f"gpu_instance_type: {s.gpu_instance_type} has no GPU; known EFA GPU types: {known}")
    _require(gpu.supports_efa, f"gpu_instance_type: {s.gpu_instance_type} does not support EFA; known EFA GPU types: {known}")
    system = INSTANCE_TYPES.get(s.system_instance_type)
    systems = ", ".join(sorted(n for n, spec in INSTANCE_TYPES.items() if spec.gpus == 0))
    _require(system is not None and system.gpus == 0,
             f"system_instance_type: {s.system_instance_type!r} must be a CPU type from the instance table: {systems}")


def _validate_training(s: Settings) -> None:
    from cdk_constructs.ray_manifests import RayClusterSpec, RayJobSpec
    from training.config import ConfigError, PlanError, parse_args

    t = s.training
    _require(re.fullmatch(r"[\w.-]+(:\d+)?(/[\w.-]+)+(:[\w.-]+|@sha256:[0-9a-f]{64})", t.image) is not None,
             f"training.image: {t.image!r} must be registry/repository:tag or @sha256:digest")
    _require(60 <= t.active_deadline_seconds <= 7 * 24 * 3600,
             f"training.active_deadline_seconds: {t.active_deadline_seconds} must be between 60 and 604800")
    # Narrower than the trainer (-1 is unlimited there): on a cluster, endless restarts bill endlessly.
    _require(0 <= t.max_failures <= 100, f"training.max_failures: {t.max_failures} must be between 0 and 100")
    _require(0 <= t.backoff_limit <= 10, f"training.backoff_limit: {t.backoff_limit} must be between 0 and 10 "
             "(retries of the whole job on a new cluster; retries inside one are training.max_failures)")
    _require(0 <= t.submitter_backoff_limit <= 10,
             f"training.submitter_backoff_limit: {t.submitter_backoff_limit} must be between 0 and 10")
    _require(0 <= t.ttl_seconds_after_finished <= 86400,
             f"training.ttl_seconds_after_finished: {t.ttl_seconds_after_finished} must be between 0 and 86400 "
             "(the finished job's cluster and GPU nodes bill meanwhile)")
    _require(0 <= t.rerun <= 999, f"training.rerun: {t.rerun} must be between 0 and 999")
    ray = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", t.ray_version)
    _require(ray is not None and tuple(map(int, ray.groups())) >= (2, 52, 0),
             f"training.ray_version: {t.ray_version!r} must be the image's Ray version, 2.52.0 or later "
             "(KubeRay's token authentication needs it)")
    _require(t.hf_token_secret is None or re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", t.hf_token_secret) is not None,
             f"training.hf_token_secret: {t.hf_token_secret!r} must be a Kubernetes Secret name (lower-case letters, digits, '-', '.')")
    # The trainer's own parser and validation, on the command line the RayJob will run; the bucket's
    # name exists only at deploy, and the names (digests) do not change what the trainer accepts.
    pods = RayClusterSpec(image=t.image, service_account="ray", trainer_files={}, worker_replicas=1, gpus_per_worker=1,
                          efa_per_worker=1, cpu_per_worker=1, memory_gib_per_worker=1)
    job = RayJobSpec(namespace="training", cluster=pods, trainer_options=trainer_options(s),
                     storage_path="s3://checkpoint-bucket/runs")
    try:
        parse_args(shlex.split(job.entrypoint())[3:])
    except ConfigError as error:
        if isinstance(error, PlanError):  # the values passed: a path the pods cannot read is named before the plan
            _validate_pod_paths(t)
        option, _, rest = str(error).partition(": ")
        # Every trainer --option the message names, as the setting it comes from.
        rest = re.sub(r"--([a-z][a-z-]*)", lambda m: _setting_of_option(m.group(1).replace("-", "_")), rest)
        raise SettingsError(f"{_setting_of_option(option.removeprefix('--').replace('-', '_'))}: {rest}") from None
    _validate_pod_paths(t)


def _validate_pod_paths(t: TrainingSettings) -> None:
    """The trainer runs in the pods, whose working directory and home are not the user's: a relative
    path that the trainer accepts on a laptop names nothing (or something else) there."""
    from training.config import BUILTIN_MODELS, HF_DATA_SPEC, SYNTHETIC_DATA, chat_template_is_file

    def local_path(value: str | None) -> str | None:
        if value is None or value in BUILTIN_MODELS or value in SYNTHETIC_DATA or "://" in value:
            return None
        if value.startswith("hf:"):
            repo = HF_DATA_SPEC.fullmatch(value).group("repo")
            return repo if repo.startswith(("/", ".", "~")) else None  # else a Hub dataset id
        return value

    model = local_path(t.model)
    if model is not None and not is_hub_model(model):
        _require(model.startswith("/"), f"training.model: {t.model!r} is not an absolute path, and the pods' working "
                 "directory is not yours; give a built-in (qwen2.5-1.5b, tiny), a hub id org/name, an absolute pod path "
                 "(/...) or s3://bucket/prefix")
    for key, value in (("training.data", t.data), ("training.val_data", t.val_data)):
        path = local_path(value)
        _require(path is None or path.startswith("/"), f"{key}: {value!r} is not an absolute path, and the pods' "
                 "working directory is not yours; give random, pattern, hf:org/name[:split], an absolute pod path "
                 "(/... or hf:/folder) or s3://bucket/prefix")
    template = t.chat_template
    if template is not None and chat_template_is_file(template) and "://" not in template:
        _require(template.startswith("/"), f"training.chat_template: {template!r} is not an absolute path, and the "
                 "pods' working directory is not yours; give an absolute pod path, s3://bucket/key or a Hub model id")


def reproducibility_warnings(s: Settings) -> list[tuple[str, str]]:
    """(id, text) of the synth warnings about settings that make a re-run differ from the run."""
    t, found = s.training, []
    if not image_is_pinned(t.image):
        found.append(("eks-fsdp-efa:unpinned-image",
                      f"training.image {t.image} is a moving tag; pin vX.Y.Z or a digest for reproducible runs."))
    if is_hub_model(t.model) and not t.model_revision:
        found.append(("eks-fsdp-efa:unpinned-model", f"training.model {t.model} has no model_revision; pin a commit "
                      "hash so that a re-run loads the same weights."))
    return found


def is_hub_model(model: str) -> bool:
    """A Hugging Face Hub id (org/name), as opposed to a built-in config or a path."""
    from training.config import BUILTIN_MODELS

    return model not in BUILTIN_MODELS and "://" not in model and not model.startswith(("/", ".", "~")) and model.count("/") == 1


def image_is_pinned(image: str) -> bool:
    """True for a digest or a vX.Y.Z tag: a vX.Y tag moves with security rebuilds."""
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    return "@sha256:" in image or re.search(r"(^|[^\d.])v?\d+\.\d+\.\d+", tag) is not None
