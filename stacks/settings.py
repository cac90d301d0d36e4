"""The app's one settings object, every field documented: read by stacks/context.py from cdk.json context
and `-c key=value`, checked by stacks/validation.py.

Every field is a context key of the same name. Training settings that are trainer options say so in their
field metadata: `trainer_options` turns them into the RayJob's options, and validation runs the trainer's
own checks on them (one source of truth for what it accepts).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field

from cdk_constructs.instance_types import INSTANCE_TYPES
from training.config import GPU_PROFILES


# The cluster trains on L4s (g6.12xlarge) by default: the trainer's l4 profile's sequence length, compile and
# loss chunk; the micro-batch and recomputation are auto (planning.plan's fastest that fits).
_L4 = GPU_PROFILES["l4"]


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
    """Sequences per GPU per forward pass, or auto: planning.plan picks it (see activation_checkpointing)."""
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
    takes planning.plan's fastest layout (with sharding auto), micro-batch and recomputation that fits in memory,
    ties going to the least memory. The micro-batch divides each GPU's sequences per step (batch_tokens / (GPUs x
    seq_len)), so the batch and the optimisation stay as set. Synth prints the pick and why (the trainer logs the
    same line), and refuses in one line, naming the setting to change, when nothing fits; a model of unknown shape
    needs values instead of auto."""
    compile: bool = field(default=_L4["compile"], metadata=_trainer())
    """torch.compile each decoder layer (about 1.26x the tokens/s on H200; docs/benchmarks.md)."""
    sharding: str = field(default="auto", metadata=_trainer())
    """full, hybrid (shard within a node, replicate across nodes), or auto: what planning.plan says is
    fastest and fits for these nodes (hybrid on 2 x g6.12xlarge; docs/benchmarks.md)."""
    reduce_dtype: str = field(default="bf16", metadata=_trainer())
    """Gradient reduction dtype: bf16 halves the bytes on the one EFA link (+52% tokens/s predicted on
    2 x g6.12xlarge; the loss curve kept fp32's in the 62-step comparison, docs/benchmarks.md), or fp32."""
    precision: str = field(default="bf16", metadata=_trainer())
    """Matmul precision of the decoder layers: bf16, fp8 (torchao float8; needs FP8 tensor cores: g6, g6e, p5,
    not g5 or p4d; full fine-tuning only) or auto: resolved at synth (planning/fp8.py) to fp8 only on GPU
    classes where fp8's speed and loss parity were measured (H100, H200: p5) and predicted faster at the run's
    shape, bf16 elsewhere (the L4 of g6 is unmeasured). `make synth`'s review gives fp8's predicted gain either way
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
    termination_grace_period_seconds: int | None = None
    """Seconds a GPU worker pod asked to stop (a drain, a spot interruption, a scale-down) has before it is killed:
    its preStop hook has the trainer save the current step and commit it first (training/preemption.py). null: the
    planner's time for one step and that save, plus 30 s, rounded up to 10 s (70 s for the default run; 120 s where
    the planner knows the run not); synth refuses less than the step and the save."""
    require_efa: bool = field(default=True, metadata=_trainer())
    """Fail the job in its first minute when inter-node NCCL traffic is not on EFA, or cannot be verified."""
    tracking: str = field(default="none", metadata=_trainer())
    """Experiment tracker of the run: none, mlflow (mlflow_tracking_uri) or wandb (wandb_api_key_secret). Rank 0
    logs every setting, each step's metrics, the health gate's line and the run summary (README, "Experiment
    tracking"); the pods install the pinned client through the Ray runtime env."""
    mlflow_tracking_uri: str | None = field(default=None, metadata=_trainer())
    """tracking mlflow: a SageMaker managed MLflow tracking server or MLflow App ARN in the stack's account (the
    Ray pods' role gets the calls the trainer makes on that ARN only), or an http(s) server the pods reach."""
    mlflow_experiment: str | None = field(default=None, metadata=_trainer())
    """tracking mlflow: the run's experiment, created if missing (default: MLflow's Default)."""
    wandb_project: str | None = field(default=None, metadata=_trainer())
    """tracking wandb: the W&B project (default: W&B's own)."""
    wandb_entity: str | None = field(default=None, metadata=_trainer())
    """tracking wandb: the W&B team or user (default: the API key's)."""
    wandb_api_key_secret: str | None = None
    """tracking wandb: the Secrets Manager secret (name or ARN, in the stack's region and account) whose value is
    the W&B API key. The pods' role may read that secret only; rank 0 reads it when the run starts, so the key is
    never in the template or the job's command line."""
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
    pre_running_deadline_seconds: int = 1200
    """KubeRay fails an attempt whose Ray cluster is not running this long after it started
    (PreRunningDeadlineExceeded, retried under backoff_limit): a GPU node whose partner got no capacity
    bills this long per attempt instead of active_deadline_seconds. Node boot (~3 min), the ~12 GiB image
    pull and a margin, above Cluster Autoscaler's 15 min max-node-provision-time."""
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
    """The one AZ of the GPU nodes (EFA traffic does not cross AZs); one of availability_zones. auto: the first of
    them in which `make preflight` found capacity for the GPU type (PROBE=1 probes on-demand capacity), cached in
    cdk.context.json under gpu-zones:<region>:<type>:<capacity type> (stacks/lookups.py)."""
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
    with a warning. 0.0.0.0/0 may be set on purpose (IAM still authenticates every request). An empty list
    (`-c endpoint_public_cidrs=`) is refused: EKS would read it as 0.0.0.0/0."""
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
    gpu_capacity_type: str = "on-demand"
    """How the GPU nodes are bought: on-demand; spot (the managed node group's SPOT capacity: up to ~90% off, and
    EC2 may reclaim a node with a 2-minute notice; README "Choosing a capacity type"); or capacity-block (a Capacity
    Block for ML given as capacity_reservation_id: paid upfront, its instances end with the block)."""
    gpu_spot_interruptions: int = 3
    """Spot only: the interruptions a run is sized to ride through, added to training.max_failures (a reclaimed
    node's worker that Ray counts as a failure) and to training.backoff_limit (a fresh cluster when no replacement
    node came within training.pre_running_deadline_seconds)."""
    gpu_scale_to_zero: bool = True
    """GPU nodes start when a job's workers wait for them and stop after it (Cluster Autoscaler, 0 to
    gpu_node_count nodes); false keeps gpu_node_count nodes running from deploy to destroy."""
    gpu_scale_down_delay_minutes: int = 5
    """Minutes a GPU node stays without a Ray worker before the autoscaler removes it."""
    image_pull_through_cache: bool = True
    """Pull training.image (of public.ecr.aws) through an ECR pull-through cache and ECR interface endpoints
    in the GPU AZ instead of the NAT gateway: $0.48/day of endpoints and ~$0.04/day of storage against
    ~$1.16 of NAT processing per job start (README, "Image pulls")."""
    gpu_node_taint: bool = True
    """Taint GPU nodes nvidia.com/gpu=true:NoSchedule so only GPU workloads land there."""
    capacity_reservation_id: str | None = None
    """On-Demand Capacity Reservation, or with gpu_capacity_type capacity-block the Capacity Block, to launch the GPU
    nodes into (cr- and 17 hex digits)."""
    placement_group: str = "auto"
    """Cluster placement group: on, off, or auto (on unless a capacity reservation is set; on with a
    reservation is refused, since a reservation launches only into the group it was made in). A Capacity Block
    needs none: EC2 places its instances close together in an UltraCluster (EC2 API Reference, CapacityBlock)."""
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
    def interruption_retries(self) -> int:
        """Retries added for spot interruptions (gpu_spot_interruptions), none for other capacity."""
        return self.gpu_spot_interruptions if self.gpu_capacity_type == "spot" else 0

    @property
    def backoff_limit(self) -> int:
        """The RayJob's backoffLimit: training.backoff_limit and the spot interruptions."""
        return self.training.backoff_limit + self.interruption_retries

    @property
    def eks_cluster_name(self) -> str:
        return self.stack_name

    @property
    def interface_endpoint_azs(self) -> int:
        """Endpoint-AZs of the stack's interface endpoints, each billed by the hour: the image cache's ecr.api and
        ecr.dkr endpoints, in the GPU AZ only (stacks/training_cluster.py _add_image_cache)."""
        return 2 if self.image_pull_through_cache else 0

    @property
    def training_workers(self) -> int:
        """Ray Train workers: one per GPU of every GPU node."""
        return self.gpu_node_count * INSTANCE_TYPES[self.gpu_instance_type].gpus

    @functools.cached_property
    def planned(self) -> tuple[dict[str, typing.Any], str | None]:
        """planned_trainer_options, computed once per settings object: validation and the stack read the same
        answer, and cdk.context.json once (a cached_property writes the instance's __dict__, which a frozen
        dataclass allows; dataclasses.replace makes a new object that plans again)."""
        return _plan(self)


def trainer_options(s: Settings) -> dict[str, typing.Any]:
    """The trainer's options (training/config.py TrainConfig names) of the RayJob: the training
    settings that are trainer options, and the world size. Where runs go is the workload's to add."""
    options = {
        f.metadata["trainer_option"] or f.name: getattr(s.training, f.name)
        for f in dataclasses.fields(TrainingSettings) if "trainer_option" in f.metadata
    }
    # A lost node's replacement is waited for as long as a new cluster's nodes are: pre_running_deadline_seconds.
    return options | {"workers": s.training_workers, "instance_type": s.gpu_instance_type,
                      "max_failures": s.training.max_failures + s.interruption_retries,
                      "node_wait_s": s.training.pre_running_deadline_seconds}


def planned_trainer_options(s: Settings) -> tuple[dict[str, typing.Any], str | None]:
    """The RayJob's trainer options: trainer_options with every auto resolved by the planner and its predicted
    step time and link bandwidth added (planning.auto.resolve_options); and the line that says what auto picked.
    The pods run explicit values: the trainer ships without the planner. Resolved once per Settings (s.planned);
    each caller gets its own copy of the options."""
    options, line = s.planned
    return dict(options), line


def _plan(s: Settings) -> tuple[dict[str, typing.Any], str | None]:
    from planning.auto import resolve_options
    from planning.model_config import PROJECT_CONTEXT_FILE, project_context, save

    # A model the planner sizes from its config.json is looked up once (the user's network and credentials) and
    # cached in cdk.context.json, as CDK caches its own lookups; the next synth needs no network.
    configs = project_context()
    cached = set(configs)
    resolved = resolve_options(trainer_options(s), configs)
    save({k: v for k, v in configs.items() if k not in cached}, PROJECT_CONTEXT_FILE)
    return resolved


def termination_grace(s: Settings, options: dict | None = None):
    """(the worker pods' grace period, seconds; the planner's StopEstimate or None): the setting, else its default
    (planning.checkpoint_time). `options`: the planned trainer options, where already at hand."""
    from planning.checkpoint_time import FALLBACK_GRACE_S, planned_stop
    from planning.model_config import project_context

    estimate = planned_stop(options if options is not None else planned_trainer_options(s)[0], project_context())
    chosen = s.training.termination_grace_period_seconds
    if chosen is None:
        chosen = estimate.grace_s if estimate else FALLBACK_GRACE_S
    return chosen, estimate


def _setting_of_option(option: str) -> str:
    """The setting a trainer --option comes from, to name it in an error."""
    for f in dataclasses.fields(TrainingSettings):
        if "trainer_option" in f.metadata and (f.metadata["trainer_option"] or f.name) == option:
            return f"training.{f.name}"
    return {"workers": "gpu_node_count", "instance_type": "gpu_instance_type",
            "node_wait_s": "training.pre_running_deadline_seconds"}.get(option, option)
