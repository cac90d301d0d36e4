"""Every rule a setting is held to, in one place. Every refusal is a SettingsError whose message is one line
naming the key and what is allowed; training settings that are trainer options also pass the trainer's own
checks (one source of truth for what it accepts).
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import shlex
import typing

from cdk_constructs.cluster import KUBECTL_LAYERS
from cdk_constructs.instance_types import INSTANCE_TYPES
from cdk_constructs.log_groups import RETENTION_DAYS
from stacks.lookups import AUTO_ZONE, CAPACITY_TYPES, offering_problem
from stacks.settings import Settings, SettingsError, TrainingSettings, _setting_of_option, planned_trainer_options


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


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SettingsError(message)


def validate(s: Settings, context: typing.Mapping[str, typing.Any] | None = None) -> None:
    """Every cross-field and range rule, in one place; `context` holds the cached lookups (stacks/lookups.py)."""
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
    # auto is still auto only where preflight asked for the settings before it looked the zones up.
    _require(s.gpu_availability_zone in s.availability_zones or s.gpu_availability_zone == AUTO_ZONE,
             f"gpu_availability_zone: {s.gpu_availability_zone!r} must be one of availability_zones "
             f"{list(s.availability_zones)}, or auto")
    _validate_vpc_cidr(s.vpc_cidr)
    # The pods reach the Hugging Face Hub through the NAT; with the image cache, ECR's first pull of a tag over the
    # interface endpoints needs it too (Amazon ECR User Guide, "Amazon ECR interface VPC endpoints", considerations).
    needs_nat = ("the image pull-through cache's first pull of a tag (ECR User Guide) and the pods' Hugging Face "
                 "downloads need it" if s.image_pull_through_cache else
                 "the nodes pull the image from ECR Public and the pods reach the Hugging Face Hub through it")
    _require(s.nat_gateways >= 1, f"nat_gateways: {s.nat_gateways} must be between 1 and the number of AZs "
                                  f"({len(s.availability_zones)}): {needs_nat}")
    _require(s.nat_gateways <= len(s.availability_zones),
             f"nat_gateways: {s.nat_gateways} must be between 1 and the number of AZs ({len(s.availability_zones)})")
    _validate_kubernetes_version(s.kubernetes_version)
    _require(s.endpoint_access in ENDPOINT_ACCESS_MODES,
             f"endpoint_access: {s.endpoint_access!r} must be one of {', '.join(ENDPOINT_ACCESS_MODES)}")
    if s.endpoint_public_cidrs is not None:
        _require(s.endpoint_access != "private",
                 "endpoint_public_cidrs: a private endpoint has no public CIDRs (unset it, or set endpoint_access=public_and_private)")
        # EKS API reference, VpcConfigRequest.publicAccessCidrs: "The default value is 0.0.0.0/0" (none given).
        _require(len(s.endpoint_public_cidrs) > 0,
                 "endpoint_public_cidrs: a public endpoint needs at least one CIDR; none would leave EKS's default, "
                 "0.0.0.0/0 (every address): give your CIDRs, 0.0.0.0/0 on purpose, `none` to unset it (`make "
                 "deploy` then uses your address), or endpoint_access=private")
        # A public-only endpoint: the nodes' calls leave the VPC through the NAT gateways this stack creates, so a
        # list without them keeps every node from joining (EKS API reference, VpcConfigRequest.endpointPrivateAccess).
        _require(s.endpoint_access != "public" or "0.0.0.0/0" in s.endpoint_public_cidrs,
                 "endpoint_public_cidrs: with endpoint_access=public the nodes reach the API from the NAT gateways' "
                 "addresses, which this stack creates and no list can name: use endpoint_access=public_and_private "
                 "(the nodes stay inside the VPC), or 0.0.0.0/0 on purpose")
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
    _validate_capacity(s, context or {})
    _require(s.log_retention_days in RETENTION_DAYS,
             f"log_retention_days: {s.log_retention_days} is not a CloudWatch retention; allowed: "
             f"{', '.join(map(str, RETENTION_DAYS))}")
    _validate_tags(s.tags)
    _validate_training(s)


def _validate_capacity(s: Settings, context: typing.Mapping[str, typing.Any]) -> None:
    _require(s.gpu_capacity_type in CAPACITY_TYPES,
             f"gpu_capacity_type: {s.gpu_capacity_type!r} must be one of {', '.join(CAPACITY_TYPES)}")
    # EKS User Guide, "Create a managed node group with Capacity Blocks for ML": the launch template targets the block.
    _require(s.gpu_capacity_type != "capacity-block" or s.capacity_reservation_id is not None,
             "gpu_capacity_type: capacity-block needs capacity_reservation_id, the Capacity Block's cr-... id "
             "(aws ec2 describe-capacity-reservations --filters Name=reservation-type,Values=capacity-block)")
    # Same page: "When upgrading managed node groups with Capacity Blocks, make sure that the desired size of the
    # node group is set to 0", which a group of fixed nodes never is; and EKS scales it to 0 before the block ends.
    _require(s.gpu_capacity_type != "capacity-block" or s.gpu_scale_to_zero,
             "gpu_scale_to_zero: a capacity-block group needs it true: EKS updates such a group only at desired size "
             "0 and scales it to 0 before the block ends; the autoscaler starts the nodes for each job")
    # A reservation holds on-demand capacity (or a block's): EC2 launches no spot instance into one.
    _require(s.gpu_capacity_type != "spot" or s.capacity_reservation_id is None,
             f"gpu_capacity_type: spot cannot launch into capacity_reservation_id {s.capacity_reservation_id} (a "
             "reservation holds on-demand capacity); unset it, or use on-demand")
    _require(0 <= s.gpu_spot_interruptions <= 20,
             f"gpu_spot_interruptions: {s.gpu_spot_interruptions} must be between 0 and 20")
    problem = offering_problem(s, context)
    _require(problem is None, problem or "")


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
    from planning.auto import PlanError
    from training.command_line import parse_args
    from training.config import ConfigError

    t = s.training
    _require(re.fullmatch(r"[\w.-]+(:\d+)?(/[\w.-]+)+(:[\w.-]+|@sha256:[0-9a-f]{64})", t.image) is not None,
             f"training.image: {t.image!r} must be registry/repository:tag or @sha256:digest")
    _require(60 <= t.active_deadline_seconds <= 7 * 24 * 3600,
             f"training.active_deadline_seconds: {t.active_deadline_seconds} must be between 60 and 604800")
    # KubeRay v1.7.0 checks activeDeadlineSeconds first and never retries it (rayjob_controller.go).
    _require(0 < t.pre_running_deadline_seconds < t.active_deadline_seconds,
             f"training.pre_running_deadline_seconds: {t.pre_running_deadline_seconds} must be positive and below "
             f"training.active_deadline_seconds ({t.active_deadline_seconds}), which KubeRay checks first and never retries")
    gpu = INSTANCE_TYPES[s.gpu_instance_type].gpu
    _require(t.precision != "fp8" or gpu.fp8_tflops > 0,
             f"training.precision: fp8 needs FP8 tensor cores, which gpu_instance_type {s.gpu_instance_type}'s {gpu.name} "
             "lacks; use training.precision bf16")
    _require(not s.image_pull_through_cache or t.image.startswith("public.ecr.aws/"),
             f"image_pull_through_cache: caches public.ecr.aws images only, training.image is {t.image!r}; "
             "set -c image_pull_through_cache=false")
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
    _validate_tracking(s)
    # The trainer's own parser and validation, on the command line the RayJob will run; the bucket's
    # name exists only at deploy, and the names (digests) do not change what the trainer accepts.
    pods = RayClusterSpec(image=t.image, service_account="ray", trainer_files={}, worker_replicas=1, gpus_per_worker=1,
                          efa_per_worker=1, cpu_per_worker=1, memory_gib_per_worker=1)
    try:
        # The planner resolves auto on the settings' own options (PlanError where it cannot), then the trainer
        # parses the exact entrypoint it will run.
        options, _ = planned_trainer_options(s)
        job = RayJobSpec(namespace="training", cluster=pods, trainer_options=options,
                         storage_path="s3://checkpoint-bucket/runs")
        parse_args(shlex.split(job.entrypoint())[3:])
    except ConfigError as error:
        if isinstance(error, PlanError):  # the values passed: a path the pods cannot read is named before the plan
            _validate_pod_paths(t)
        option, _, rest = str(error).partition(": ")
        # Every trainer --option the message names, as the setting it comes from.
        rest = re.sub(r"--([a-z][a-z-]*)", lambda m: _setting_of_option(m.group(1).replace("-", "_")), rest)
        raise SettingsError(f"{_setting_of_option(option.removeprefix('--').replace('-', '_'))}: {rest}") from None
    _validate_pod_paths(t)
    _validate_grace(s, options)


# Kubernetes accepts any non-negative grace period; past an hour a pod that will not stop holds its node (and bill).
MAX_GRACE_S = 3600


def _validate_grace(s: Settings, options: dict) -> None:
    """A drained worker pod must live until its save is committed (training.preemption): the planner's one step and
    save (planning.checkpoint_time) is the least it may be given."""
    from stacks.settings import termination_grace

    chosen = s.training.termination_grace_period_seconds
    if chosen is None:
        return
    _require(1 <= chosen <= MAX_GRACE_S, f"training.termination_grace_period_seconds: {chosen} must be between 1 and "
             f"{MAX_GRACE_S}")
    _, estimate = termination_grace(s, options)
    if estimate is not None and chosen < estimate.needed_s:
        raise SettingsError(f"training.termination_grace_period_seconds: {chosen} is below the {estimate.needed_s:.0f} s "
                            f"a drained pod needs to save its step (one step, then {estimate.bytes_per_node / 1e9:.1f} GB a "
                            f"node written and uploaded; planning/checkpoint_time.py): give at least "
                            f"{math.ceil(estimate.needed_s)}, or null for the default")


# Secrets Manager secret names: 1-512 of letters, digits and /_+=.@- (CreateSecret's Name); an ARN ends in the
# name and the 6 random characters Secrets Manager appends.
_SECRET_NAME = r"[A-Za-z0-9/_+=.@-]{1,512}"
_SECRET_ARN = re.compile(rf"arn:aws[a-z-]*:secretsmanager:([a-z0-9-]+):(\d{{12}}):secret:{_SECRET_NAME}")


def _validate_tracking(s: Settings) -> None:
    """What the pods' role and environment need for the tracker; the trainer checks its own options."""
    from training.tracking import SAGEMAKER_MLFLOW_ARN

    t = s.training
    secret = t.wandb_api_key_secret
    _require((t.tracking == "wandb") == (secret is not None),
             "training.wandb_api_key_secret: the Secrets Manager secret holding the W&B API key is needed with "
             "training.tracking wandb, and only then" + (f" (training.tracking is {t.tracking})" if secret else ""))
    if secret is not None:
        arn = _SECRET_ARN.fullmatch(secret)
        _require(arn is not None or re.fullmatch(_SECRET_NAME, secret) is not None,
                 f"training.wandb_api_key_secret: {secret!r} must be a Secrets Manager secret name (letters, digits, "
                 "/_+=.@-) or its ARN (arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>)")
        _require(arn is None or (arn.group(1) == s.region and s.account in (None, arn.group(2))),
                 f"training.wandb_api_key_secret: {secret!r} is not in the stack's region {s.region}"
                 + (f" and account {s.account}" if s.account else "") + "; the pods read the secret there")
    server = SAGEMAKER_MLFLOW_ARN.fullmatch(t.mlflow_tracking_uri or "")
    _require(server is None or s.account in (None, server.group(3)),
             f"training.mlflow_tracking_uri: {t.mlflow_tracking_uri!r} is in account {server.group(3) if server else ''}, "
             f"the stack in {s.account}: SageMaker MLflow takes no resource policy, so the pods' role cannot be "
             "allowed there; use a tracking server or MLflow App of this account")


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
