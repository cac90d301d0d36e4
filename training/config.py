"""Run settings of the trainer: one dataclass, its command line, and its validation.

`validate` is pure and offline: `cdk synth` runs it on the RayJob's exact entrypoint, so a value
the trainer would refuse on the cluster is refused at synth. training/inputs.py looks for the model
and data where they live, on the machine that starts the run, before Ray starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
from dataclasses import dataclass


# Built-in model configurations: random init, no download (benchmarks, tests, smoke runs).
BUILTIN_MODELS = ("qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-14b", "tiny")
# The longest sequence each known architecture was built for (the Qwen2.5 model cards: 32,768; 7B and
# 14B reach 131,072 only with YaRN rope scaling, which the built-in configs do not set).
MODEL_MAX_POSITIONS = {"qwen2.5-1.5b": 32768, "qwen2.5-7b": 32768, "qwen2.5-14b": 32768, "tiny": 4096}
# Hub models whose architecture is known here (what synth can know without a download).
HUB_ARCHITECTURES = {f"Qwen/Qwen2.5-{size}{kind}": f"qwen2.5-{size.lower()}"
                     for size in ("1.5B", "7B", "14B") for kind in ("", "-Instruct")}
SHARDINGS = ("auto", "full", "hybrid")
# Activation checkpointing: which decoder layers recompute their forward in backward (training.model).
# selective checkpoints every SELECTIVE_EVERY-th layer (torchtitan's layer-level selective AC at that
# frequency): half the layers keep their activations, half keep only their input and run forward twice,
# so memory and recomputation both land halfway between none and full, predictably for the planner.
RECOMPUTATION = ("none", "selective", "full")
SELECTIVE_EVERY = 2
# auto (--micro-batch, --activation-checkpointing, --sharding): the planner picks them before the trainer starts
# (planning.auto, at synth and in `python -m planning.train`); the trainer itself runs explicit values.
AUTO = "auto"
REDUCE_DTYPES = ("fp32", "bf16")
# Matmul precision of the decoder layers (training.fp8): bf16, or float8 on GPUs with FP8 tensor cores.
PRECISIONS = ("bf16", "fp8")
# Attention kernels, by the name transformers gives them; auto picks one (training.model.attention_kernel).
ATTENTIONS = {"auto": None, "sdpa": "sdpa", "flex": "flex_attention"}
# Data sources that need no files: uniform random token ids, or a learnable pattern.
SYNTHETIC_DATA = ("random", "pattern")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
# Per-GPU settings measured to fit and run fast (docs/benchmarks.md); --profile NAME applies
# one, and any option given explicitly still wins. The cluster's defaults are the l4 profile's sequence
# length, loss chunk and batch, with the micro-batch and recomputation left to auto.
GPU_PROFILES: dict[str, dict] = {
    # H100/H200 (80 GB and more): no recomputation, large micro-batches, gathered weights kept.
    "h200": {"seq_len": 4096, "micro_batch": 8, "activation_checkpointing": "none", "compile": True,
             "loss_chunk_tokens": 8192, "reshard_after_forward": False},
    # L4 (g6.12xlarge, 24 GB): recompute each layer, one sequence at a time.
    "l4": {"seq_len": 2048, "micro_batch": 1, "grad_accum": 4, "activation_checkpointing": "full", "compile": True,
           "loss_chunk_tokens": 2048},
}
# LoRA: peft's "all-linear" (every linear layer but the output head), or module names such as q_proj,v_proj.
LORA_ALL_LINEAR = "all-linear"
MAX_LORA_RANK = 4096
# Upper bounds that catch a typo (an extra zero) before it books GPUs for a year.
MAX_STEPS = 10_000_000
MAX_MICRO_BATCH = 4096
MAX_GRAD_ACCUM = 65536
MAX_WORKERS = 4096
MAX_SEQ_LEN = 131072
MAX_LOSS_CHUNK_TOKENS = 1 << 20
# Paths and URIs reach a shell command line (the RayJob entrypoint): no spaces, quotes, $, ;, |, &, `.
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/:=@+,~-]+")
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}")
# hf:org/name[@revision][[:config]:split] or hf:/folder[:split]; training.data reads the same spec. A
# config comes only before a split (hf:org/name:config:split), so hf:org/name:split keeps its meaning.
HF_DATA_SPEC = re.compile(r"hf:(?P<repo>[^:@]+?)(?:@(?P<revision>[A-Za-z0-9][\w./-]{0,127}))?"
                          r"(?::(?P<config>[A-Za-z0-9_.-]+)(?=:[^:]+$))?(?::(?P<split>[A-Za-z0-9_.-]+))?")
HF_SPEC_FORMS = "hf:org/name[@revision][:config]:split or hf:/folder[:split]"
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# S3 bucket naming rules: 3-63 characters, lower-case letters, digits, '.' and '-', letters or digits at the ends.
_S3_URI = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/.*)?")


class ConfigError(ValueError):
    """A bad option; the message is one line that names it and what is allowed."""


@dataclass
class TrainConfig:
    """Everything one training run needs; every field is a --option of the same name."""

    model: str = "tiny"
    """Hub id (org/name), local or s3:// folder, or a built-in config: qwen2.5-1.5b, tiny."""
    model_revision: str | None = None
    """Hub revision of the model and its tokenizer: a commit hash pins the exact weights."""
    steps: int = 100
    """Optimizer steps."""
    seq_len: int = 512
    """Tokens per sequence."""
    micro_batch: int | str = 4
    """Sequences per worker per forward/backward, or auto: the planner's fastest split of each worker's share of
    --batch-tokens that fits (needs --batch-tokens, a known --instance-type and a model of known shape; resolved by
    the synth or `python -m planning.train`, never by the trainer)."""
    grad_accum: int = 1
    """Micro-batches per worker per optimizer step; derived from --batch-tokens when that is given."""
    batch_tokens: int | None = None
    """Tokens per optimizer step over all workers (the batch the optimisation sees): grad_accum becomes
    batch_tokens / (workers x micro_batch x seq_len), so the batch stays the same on any number of GPUs."""
    lr: float = 3e-4
    """Peak learning rate, reached after warmup, then cosine decay."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of the peak."""
    warmup_steps: int = 10
    """Linear warmup steps."""
    weight_decay: float = 0.1
    """AdamW weight decay (not on biases and norms)."""
    grad_clip: float = 1.0
    """Gradient-norm clip (0 disables)."""
    activation_checkpointing: str = "none"
    """Recompute decoder layers in backward: none; full (every layer: least memory, about 1/3 more compute);
    selective (every second layer: half of each); or auto (the planner's fastest that fits, as for
    --micro-batch auto). The old boolean form still works: the bare flag is full, --no-activation-checkpointing none."""
    compile: bool = False
    """torch.compile each decoder layer (GPU)."""
    loss_chunk_tokens: int = 8192
    """Tokens per chunk of the fused head + cross-entropy (its bf16 logits: chunk x vocab x 2 bytes)."""
    reshard_after_forward: bool = True
    """Free each layer's gathered weights after forward (re-gathered in backward): less memory.
    Off: they stay gathered through backward and through all of a step's micro-batches."""
    sharding: str = "auto"
    """full (FSDP over every GPU), hybrid (shard within a node, replicate across nodes: only one
    gradient all-reduce per step crosses nodes), or auto: the planner's fastest that fits (on one machine, --local,
    full without it)."""
    reduce_dtype: str = "fp32"
    """Dtype of gradient reduction on GPU: fp32, or bf16 (half the bytes on the links)."""
    precision: str = "bf16"
    """Matmuls of the decoder layers: bf16, or fp8 (torchao float8, tensorwise scaling, weights all-gathered
    in float8; the LM head and loss stay bf16). fp8 needs FP8 tensor cores (L4, L40S, H100, H200), full
    fine-tuning and torchao (training.fp8; docs/benchmarks.md has its measured speed and loss). auto: the
    planner's pick (planning/fp8.py), fp8 only on a GPU class where its speed and loss parity were measured
    and where it is predicted faster; resolved before the trainer starts."""
    attention: str = "auto"
    """Attention kernel: sdpa (PyTorch's fused kernels; a document mask makes it use a slower masked
    one), flex (flex attention: skips the masked blocks of packed documents), or auto: flex for real
    data on GPU, sdpa otherwise (docs/benchmarks.md)."""
    instance_type: str | None = None
    """The nodes' EC2 instance type (planning/hardware.py): what the planner resolves auto for."""
    predicted_step_seconds: float | None = None
    """The planner's step time for this run, seconds (the synth passes it): the hang watchdog allows max(10 x this,
    60 s) per step."""
    watchdog_step_seconds: float | None = None
    """The hang watchdog's bound per step, seconds. Unset: from --predicted-step-seconds; without one, max(60 s,
    10 x the slowest of steps 2-4), measured (1,800 s until then)."""
    predicted_link_gbps: float | None = None
    """The planner's bandwidth of the slowest link the step's collectives cross, GB/s one way (each node's network
    on several nodes, the intra-node link per GPU on one; the synth passes it): the health gate fails a node pair
    below half of it."""
    profile: str | None = None
    """Apply a GPU profile's settings first: h200 or l4 (explicit options still win)."""
    data: str = "pattern"
    """random, pattern, a JSONL/Parquet file or folder (local path or s3://), or a Hub dataset:
    hf:org/name[@revision][:config][:split] (a revision pins the data as --model-revision pins the model;
    the config is one of the dataset card's `configs`), or hf:/folder[:split] for one saved in the Hub's layout."""
    text_field: str = "text"
    """Field holding plain text (every token is learned)."""
    messages_field: str = "messages"
    """Field holding a chat: a list of {role, content}, rendered with the tokenizer's chat template."""
    prompt_field: str | None = None
    """Instruction data: the field(s) of the user turn, comma-separated (joined by blank lines)..."""
    response_field: str | None = None
    """...and the field of the assistant's reply (both or neither)."""
    assistant_only_loss: bool = True
    """Chat: learn only the assistant turns; --no-assistant-only-loss learns every token."""
    chat_template: str | None = None
    """Chat: a template used instead of the tokenizer's (also saved with the export): a Jinja file
    (a path, or s3://) or a Hub model id (org/name) whose tokenizer's template to take."""
    default_system_prompt: bool = True
    """Chat: --no-default-system-prompt gives a chat without a system turn an empty one where the
    template would write its own default (Qwen2.5's 'You are Qwen, ...'); other templates are untouched."""
    val_data: str | None = None
    """Validation data, in any --data form (e.g. hf:org/name:validation)."""
    val_fraction: float = 0.0
    """Or hold out this fraction of --data's documents for validation (chosen by content hash)."""
    eval_every: int = 0
    """Steps between validation passes (0: only at the end); needs --val-data or --val-fraction."""
    eval_batches: int = 16
    """At most this many micro-batches per worker in one validation pass (each block counted once)."""
    shuffle: bool = True
    """Shuffle the records across files before packing and the blocks each epoch, seeded by --seed
    (a resumed run replays the same order); --no-shuffle keeps file order, for curricula."""
    storage_path: str = "runs"
    """Where checkpoints and the run summary go: a local folder or s3://bucket/prefix."""
    run_name: str = "run"
    """Run name; a rerun with the same storage path and name resumes from its latest checkpoint."""
    checkpoint_every: int = 0
    """Steps between checkpoints (0: only at the end)."""
    async_checkpoint: bool = True
    """Write checkpoints in the background (training pauses only to copy the shards to CPU memory)."""
    max_failures: int = 0
    """Worker-group restarts from the last checkpoint that Ray Train may make."""
    node_wait_s: int = -1
    """Seconds in all that Ray Train waits for its workers' nodes after restarts before the run fails (-1: no limit,
    Ray's default); training/failures.py."""
    workers: int = 2
    """Training workers (one per GPU on a cluster)."""
    local: bool = False
    """Start a local Ray instead of joining a cluster."""
    gpu: bool | None = None
    """Train on GPUs (default: when the cluster or machine has them)."""
    require_efa: bool = False
    """Fail in the first minute when inter-node NCCL traffic does not use EFA."""
    seed: int = 0
    """Seed of initialisation, synthetic data and the data order."""
    log_every: int = 1
    """Steps between log lines (other steps make no host sync)."""
    peak_tflops: float | None = None
    """Per-GPU bf16 peak for MFU; default from the GPU's name."""
    export_hf: bool = False
    """At the end, save the model in Hugging Face format under <run>/hf-export: bf16 safetensors, the
    source's generation config, tokenizer and chat template (training.export; LoRA merged)."""
    export_checkpoints: bool = False
    """Also save that export inside each checkpoint (<checkpoint>/hf), kept and deleted with it."""
    lora_rank: int = 0
    """LoRA adapter rank (peft); 0 fine-tunes every weight. Above 0: the base weights are frozen in bf16
    and only the adapters train, in fp32 with their optimizer state."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator: an adapter's update is scaled by alpha / rank."""
    lora_dropout: float = 0.0
    """Dropout on the adapters' input (training only)."""
    lora_target_modules: str = LORA_ALL_LINEAR
    """Modules that get adapters: all-linear (every linear layer but the LM head) or names, comma-separated
    (e.g. q_proj,k_proj,v_proj,o_proj)."""
    tracking: str = "none"
    """Experiment tracker rank 0 logs the run to: none, mlflow or wandb (training/tracking.py)."""
    mlflow_tracking_uri: str | None = None
    """--tracking mlflow: http(s)://host[:port][/path], or a SageMaker managed MLflow ARN
    (arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name> or mlflow-app/<id>)."""
    mlflow_experiment: str | None = None
    """--tracking mlflow: the run's experiment, created if missing (default: MLflow's Default)."""
    wandb_project: str | None = None
    """--tracking wandb: the W&B project (default: WANDB_PROJECT, else W&B's own)."""
    wandb_entity: str | None = None
    """--tracking wandb: the W&B team or user (default: the API key's)."""
    cache_dir: str | None = None
    """Hugging Face cache (on the cluster: the node-local volume shared by a pod's workers)."""
    inject_failure_at_step: int | None = None
    """Testing recovery: the last rank's worker is killed (SIGKILL) once at this step."""
    inject_nan_at_step: int | None = None
    """Testing the non-finite guard: rank 0's loss is NaN at this step."""

    @property
    def tokens_per_step_per_worker(self) -> int:
        return self.micro_batch * self.grad_accum * self.seq_len


# What a resumed run must share with its checkpoint: every setting that changes the model, the data order or
# the optimisation (train.refuse_changed_resume, on the driver). The world size is not among them: the global
# batch (global_batch_sequences) is, and the checkpoint reshards onto any number of workers.
RESUME_SETTINGS = ("model", "model_revision", "seq_len", "steps", "lr", "warmup_steps", "min_lr_ratio", "weight_decay",
                   "grad_clip", "reduce_dtype", "data", "val_fraction", "shuffle", "seed", "text_field", "messages_field",
                   "prompt_field", "response_field", "assistant_only_loss", "chat_template", "default_system_prompt",
                   "lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules")


def global_batch_sequences(settings: dict) -> int:
    """Sequences per optimizer step over all workers: --batch-tokens / --seq-len where the batch is given in tokens
    (micro-batch and accumulation then follow the world size), else workers x micro-batch x accumulation."""
    if settings.get("batch_tokens"):
        return settings["batch_tokens"] // settings["seq_len"]
    return settings["workers"] * settings["micro_batch"] * settings["grad_accum"]


def resume_changes(saved: dict, current: dict) -> list[str]:
    """'--option old -> new' for each resume setting that differs from the checkpoint's, and the global batch."""
    changed = [f"{option_flag(k)} {saved[k]!r} -> {current.get(k)!r}" for k in RESUME_SETTINGS
               if k in saved and saved[k] != current.get(k)]
    before, after = global_batch_sequences(saved), global_batch_sequences(current)
    if before != after:
        changed.append(f"global batch (--batch-tokens / --seq-len, or --workers x --micro-batch x --grad-accum) "
                       f"{before} -> {after} sequences")
    return changed


def validate(c: TrainConfig) -> TrainConfig:
    """Every rule that needs no file and no network; each refusal is one line naming the option."""
    def require(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    require(1 <= c.steps <= MAX_STEPS, f"--steps: {c.steps} must be between 1 and {MAX_STEPS:,}")
    require(8 <= c.seq_len <= MAX_SEQ_LEN, f"--seq-len: {c.seq_len} must be between 8 and {MAX_SEQ_LEN}")
    require(c.micro_batch == AUTO or 1 <= c.micro_batch <= MAX_MICRO_BATCH,
            f"--micro-batch: {c.micro_batch} must be between 1 and {MAX_MICRO_BATCH}, or auto")
    c = dataclasses.replace(c, activation_checkpointing=_OLD_RECOMPUTATION.get(c.activation_checkpointing,
                                                                              c.activation_checkpointing))
    require(c.activation_checkpointing in RECOMPUTATION + (AUTO,), f"--activation-checkpointing: "
            f"{c.activation_checkpointing!r} must be one of {', '.join(RECOMPUTATION + (AUTO,))}")
    require(1 <= c.grad_accum <= MAX_GRAD_ACCUM, f"--grad-accum: {c.grad_accum} must be between 1 and {MAX_GRAD_ACCUM}")
    require(0 < c.lr < 1, f"--lr: {c.lr} must be in (0, 1)")
    require(0 <= c.min_lr_ratio <= 1, f"--min-lr-ratio: {c.min_lr_ratio} must be in [0, 1]")
    require(0 <= c.warmup_steps <= MAX_STEPS, f"--warmup-steps: {c.warmup_steps} must be between 0 and {MAX_STEPS:,}")
    require(0 <= c.weight_decay < 1, f"--weight-decay: {c.weight_decay} must be in [0, 1)")
    require(c.grad_clip >= 0, f"--grad-clip: {c.grad_clip} must be 0 or more")
    require(0 <= c.checkpoint_every <= c.steps,
            f"--checkpoint-every: {c.checkpoint_every} must be between 0 (only at the end) and the number of steps ({c.steps})")
    require(-1 <= c.max_failures <= 1000, f"--max-failures: {c.max_failures} must be -1 (unlimited) or between 0 and 1000")
    require(c.node_wait_s == -1 or 0 <= c.node_wait_s <= 7 * 86400,
            f"--node-wait-s: {c.node_wait_s} must be -1 (no limit) or between 0 and 604800")
    require(1 <= c.loss_chunk_tokens <= MAX_LOSS_CHUNK_TOKENS,
            f"--loss-chunk-tokens: {c.loss_chunk_tokens} must be between 1 and {MAX_LOSS_CHUNK_TOKENS}")
    require(c.sharding in SHARDINGS, f"--sharding: {c.sharding!r} must be one of {', '.join(SHARDINGS)}")
    require(c.attention in ATTENTIONS, f"--attention: {c.attention!r} must be one of {', '.join(ATTENTIONS)}")
    require(c.reduce_dtype in REDUCE_DTYPES, f"--reduce-dtype: {c.reduce_dtype!r} must be one of {', '.join(REDUCE_DTYPES)}")
    require(c.instance_type is None or re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+", c.instance_type) is not None,
            f"--instance-type: {c.instance_type!r} is not an EC2 instance type name (family.size, e.g. g6.12xlarge)")
    for option in ("predicted_step_seconds", "predicted_link_gbps", "watchdog_step_seconds"):
        value = getattr(c, option)
        require(value is None or 0 < value < float("inf"), f"{option_flag(option)}: {value} must be above 0")
    require(c.precision in PRECISIONS + (AUTO,), f"--precision: {c.precision!r} must be one of {', '.join(PRECISIONS + (AUTO,))}")
    # LoRA's frozen base weights get no gradient and its adapters are small: float8 casts would cost more than they save.
    require(c.precision != "fp8" or c.lora_rank == 0,
            f"--precision: fp8 trains full weights; with --lora-rank {c.lora_rank} use --precision bf16")
    require(c.precision != "fp8" or c.gpu is not False,
            "--precision: fp8 needs a GPU with FP8 tensor cores; --no-gpu trains on the CPU: use --precision bf16")
    require(c.profile is None or c.profile in GPU_PROFILES,
            f"--profile: {c.profile!r} is not one of {', '.join(GPU_PROFILES)}")
    require(1 <= c.workers <= MAX_WORKERS, f"--workers: {c.workers} must be between 1 and {MAX_WORKERS}")
    require(1 <= c.log_every <= MAX_STEPS, f"--log-every: {c.log_every} must be between 1 and {MAX_STEPS:,}")
    require(c.peak_tflops is None or 0 < c.peak_tflops < 100_000, f"--peak-tflops: {c.peak_tflops} must be above 0 and below 100,000")
    # The run name is a folder under the storage path: it may not climb out of it or hide.
    require(re.fullmatch(r"[A-Za-z0-9_][\w.-]{0,127}", c.run_name) is not None and ".." not in c.run_name,
            f"--run-name: {c.run_name!r} must start with a letter, digit or '_' and hold only letters, digits, "
            "'.', '_' and '-' (no '..'), at most 128 characters")
    _validate_model(c.model)
    require(c.model_revision is None or re.fullmatch(r"[A-Za-z0-9][\w.-]{0,127}", c.model_revision) is not None,
            f"--model-revision: {c.model_revision!r} must be a commit hash, branch or tag (letters, digits, '.', '_', '-')")
    max_positions = MODEL_MAX_POSITIONS.get(HUB_ARCHITECTURES.get(c.model, c.model))
    require(max_positions is None or c.seq_len <= max_positions,
            f"--seq-len: {c.seq_len} exceeds {c.model}'s {max_positions} positions")
    _validate_location("--storage-path", c.storage_path)
    if c.data not in SYNTHETIC_DATA:
        _validate_data("--data", c.data)
        require(c.model not in BUILTIN_MODELS, f"--data: real data needs a tokenizer; --model {c.model} is a built-in "
                "config without one (give a hub id or a saved model folder, or --data random/pattern)")
    if c.val_data is not None:
        require(c.data not in SYNTHETIC_DATA,
                f"--val-data: synthetic --data {c.data} has its own held-out stream; use --val-fraction instead")
        _validate_data("--val-data", c.val_data)
        require(c.val_fraction == 0, f"--val-fraction: {c.val_fraction} and --val-data are exclusive; give one")
    require(0 <= c.val_fraction <= 0.5, f"--val-fraction: {c.val_fraction} must be in [0, 0.5]")
    validating = c.val_data is not None or c.val_fraction > 0
    require(0 <= c.eval_every <= c.steps, f"--eval-every: {c.eval_every} must be between 0 (only at the end) "
            f"and the number of steps ({c.steps})")
    require(c.eval_every == 0 or validating, f"--eval-every: {c.eval_every} needs --val-data or --val-fraction")
    require(1 <= c.eval_batches <= MAX_GRAD_ACCUM, f"--eval-batches: {c.eval_batches} must be between 1 and {MAX_GRAD_ACCUM}")
    for option in ("text_field", "messages_field", "response_field"):
        value = getattr(c, option)
        require(value is None or _FIELD.fullmatch(value) is not None,
                f"{option_flag(option)}: {value!r} must be a field name (letters, digits, '_')")
    require(c.prompt_field is None or all(_FIELD.fullmatch(f) for f in c.prompt_field.split(",")),
            f"--prompt-field: {c.prompt_field!r} must be field names separated by commas (letters, digits, '_')")
    require((c.prompt_field is None) == (c.response_field is None),
            "--prompt-field and --response-field: give both (instruction data) or neither")
    if c.cache_dir is not None:
        _validate_location("--cache-dir", c.cache_dir, remote=False)
    if c.chat_template is not None and chat_template_is_file(c.chat_template):
        _validate_location("--chat-template", c.chat_template)
        require(c.chat_template.endswith(TEMPLATE_SUFFIXES),
                f"--chat-template: {c.chat_template!r} must be a {'/'.join(TEMPLATE_SUFFIXES)} file or a Hub model id (org/name)")
    elif c.chat_template is not None:
        require(HUB_ID.fullmatch(c.chat_template) is not None and "--" not in c.chat_template,
                f"--chat-template: {c.chat_template!r} must be a {'/'.join(TEMPLATE_SUFFIXES)} file or a Hub model id (org/name)")
    require(0 <= c.lora_rank <= MAX_LORA_RANK, f"--lora-rank: {c.lora_rank} must be between 0 (full fine-tuning) "
            f"and {MAX_LORA_RANK}")
    require(0 < c.lora_alpha <= 1e6, f"--lora-alpha: {c.lora_alpha} must be above 0 (at most 1e6)")
    require(0 <= c.lora_dropout < 1, f"--lora-dropout: {c.lora_dropout} must be in [0, 1)")
    targets = c.lora_target_modules.split(",")
    require(c.lora_target_modules == LORA_ALL_LINEAR or (all(_FIELD.fullmatch(t) for t in targets)
                                                         and len(set(targets)) == len(targets)),
            f"--lora-target-modules: {c.lora_target_modules!r} must be {LORA_ALL_LINEAR} or distinct module names "
            "separated by commas (letters, digits, '_')")
    for option in ("inject_failure_at_step", "inject_nan_at_step"):
        value = getattr(c, option)
        require(value is None or 1 <= value <= c.steps,
                f"{option_flag(option)}: {value} must be between 1 and the number of steps ({c.steps})")
    from training.tracking import option_problem

    tracking = option_problem(c)
    require(tracking is None, tracking or "")
    require(c.micro_batch != AUTO or c.batch_tokens is not None,
            "--micro-batch: auto needs --batch-tokens (the batch it splits into micro-batches; the optimisation keeps it)")
    if c.micro_batch == AUTO:
        grad_accum_for(c.batch_tokens, c.workers, 1, c.seq_len)  # whole sequences per worker
    elif c.batch_tokens is not None:
        accum = grad_accum_for(c.batch_tokens, c.workers, c.micro_batch, c.seq_len)
        # 1 is the unset default; parse_args refuses --grad-accum given together with --batch-tokens.
        require(c.grad_accum in (1, accum), f"--grad-accum: {c.grad_accum} and --batch-tokens {c.batch_tokens} "
                f"(which gives {accum} at {c.workers} workers) are exclusive; give one")
        c = dataclasses.replace(c, grad_accum=accum)
    return c


TEMPLATE_SUFFIXES = (".jinja", ".j2", ".txt")


def chat_template_is_file(value: str) -> bool:
    """--chat-template names a file (a template suffix, or a path or s3:// URI), else a Hub model id."""
    return value.endswith(TEMPLATE_SUFFIXES) or value.startswith(("/", ".", "~", "s3://", "file://"))


def grad_accum_for(batch_tokens: int, workers: int, micro_batch: int, seq_len: int) -> int:
    """Micro-batches per worker per step that make batch_tokens; ConfigError (one line, the nearest
    valid batches) when the workers' micro-batches cannot add up to it."""
    per_round = workers * micro_batch * seq_len
    if batch_tokens < 1 or batch_tokens % per_round or batch_tokens // per_round > MAX_GRAD_ACCUM:
        below, above = max(batch_tokens // per_round, 1) * per_round, (batch_tokens // per_round + 1) * per_round
        nearest = f"{below:,} or {above:,}" if below < batch_tokens else f"{below:,}"
        raise ConfigError(f"--batch-tokens: {batch_tokens:,} is not a multiple of {workers} workers (--workers) x "
                          f"{micro_batch} sequences (--micro-batch) x {seq_len:,} tokens (--seq-len) = {per_round:,} "
                          f"(at most {MAX_GRAD_ACCUM:,} times); nearest valid: {nearest}")
    return batch_tokens // per_round


# The old boolean --activation-checkpointing (cdk.json true/false, a bool in code): every layer, or none.
_OLD_RECOMPUTATION = {True: "full", False: "none", "true": "full", "false": "none"}


def _validate_data(option: str, value: str) -> None:
    if value.startswith("hf:"):
        match = HF_DATA_SPEC.fullmatch(value)
        repo = match.group("repo") if match else ""
        local = repo.startswith(("/", "./", "../", "~"))
        if match is None or not (local or (HUB_ID.fullmatch(repo) and "--" not in repo and ".." not in repo)):
            raise ConfigError(f"{option}: {value!r} must be {HF_SPEC_FORMS} "
                              "(a revision, config or split is letters, digits, '_', '.', '-')")
        if local and (match.group("revision") or match.group("config")):
            raise ConfigError(f"{option}: {value!r}: a local folder has no revision or config; give hf:/folder[:split]")
        if local:
            _validate_location(option, repo, remote=False)
        return
    _validate_location(option, value)
    name = value.rstrip("/").rsplit("/", 1)[-1]
    if not (value.endswith("/") or name.endswith(DATA_SUFFIXES) or "." not in name):
        raise ConfigError(f"{option}: {value!r} must be random, pattern, hf:org/name[:split], "
                          f"a {'/'.join(DATA_SUFFIXES)} file, or a folder of them")


def _validate_model(model: str) -> None:
    if model in BUILTIN_MODELS:
        return
    if model.startswith(("s3://", "/", "./", "../", "~", "file://")):
        _validate_location("--model", model)
        return
    if HUB_ID.fullmatch(model) is None or "--" in model or ".." in model:
        raise ConfigError(f"--model: {model!r} is not a built-in ({', '.join(BUILTIN_MODELS)}), a hub id org/name, "
                          "a path (/..., ./...) or s3://bucket/prefix")


def _validate_location(option: str, value: str, remote: bool = True) -> None:
    """A local path, file:// or s3://bucket/prefix, in characters that are safe on a command line."""
    if not value or _PATH_CHARS.fullmatch(value) is None:
        raise ConfigError(f"{option}: {value!r} may hold only letters, digits and . _ / : = @ + , ~ - "
                          "(no spaces or shell characters)")
    if "://" not in value:
        return
    scheme = value.split("://", 1)[0]
    if not remote or scheme not in ("s3", "file"):
        allowed = "a local path, file:// or s3://bucket/prefix" if remote else "a local path"
        raise ConfigError(f"{option}: {value!r} must be {allowed}")
    if scheme == "s3" and _S3_URI.fullmatch(value) is None:
        raise ConfigError(f"{option}: {value!r} must be s3://bucket/prefix with a valid bucket name "
                          "(3-63 lower-case letters, digits, '.' or '-')")
    if scheme == "file" and not value.startswith("file:///"):
        raise ConfigError(f"{option}: {value!r} must be an absolute file:///path")


def option_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError (one line naming the option) instead of exiting."""

    def error(self, message: str):
        match = re.fullmatch(r"argument (--[\w-]+)(?:/--[\w-]+)?: (.*)", message)
        if match and match.group(2).startswith(match.group(1) + ":"):
            message = match.group(2)
        elif match:
            message = f"{match.group(1)}: {match.group(2)}"
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m training.train",
        description="Fine-tune a causal LM with FSDP2 under Ray Train (laptop, GPU box or EKS).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    docs = _field_docs()
    for f in dataclasses.fields(TrainConfig):
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        help_text = docs.get(f.name, "")
        if kind.startswith("bool"):
            parser.add_argument(option_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                                default=f.default, help=help_text)
            continue
        if f.name == "activation_checkpointing":  # once a boolean flag: bare, it still means full
            parser.add_argument(option_flag(f.name), dest=f.name, nargs="?", const="full", default=f.default,
                                metavar="{" + ",".join(RECOMPUTATION + (AUTO,)) + "}", help=help_text)
            parser.add_argument("--no-activation-checkpointing", dest=f.name, action="store_const", const="none",
                                help="the same as --activation-checkpointing none")
            continue
        base = {"int": int, "float": float, "str": str}[kind.split(" ")[0]]
        parser.add_argument(option_flag(f.name), dest=f.name, type=_typed(base, f.name), default=f.default, help=help_text)
    return parser


def _typed(base: type, name: str):
    def parse(text: str):
        if text == AUTO and name == "micro_batch":
            return AUTO
        try:
            return base(text)
        except ValueError:
            kind = "an integer" if base is int else "a number"
            raise argparse.ArgumentTypeError(f"{option_flag(name)}: {text!r} is not {kind}"
                                             f"{' or auto' if name == 'micro_batch' else ''}") from None

    parse.__name__ = base.__name__
    return parse


@functools.lru_cache(maxsize=1)
def _field_docs() -> dict[str, str]:
    """Field docstrings (the string right after each field) become the --help text."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(TrainConfig))
    docs, body = {}, tree.body[0].body
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            docs[node.target.id] = following.value.value
    return docs


def options_argv(options: dict) -> list[str]:
    """The command line of trainer options by TrainConfig name: --flag=value each (booleans --flag / --no-flag,
    None left out), as the RayJob's entrypoint writes them."""
    argv = []
    for name, value in options.items():
        if isinstance(value, bool):
            argv.append(option_flag(name) if value else "--no-" + name.replace("_", "-"))
        elif value is not None:
            argv.append(f"{option_flag(name)}={value}")
    return argv


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    parser = build_parser()
    chosen, _ = parser.parse_known_args(argv)
    given = parser.parse_known_args(argv, argparse.Namespace(grad_accum=None))[0]
    if chosen.batch_tokens is not None and given.grad_accum is not None:
        raise ConfigError(f"--grad-accum: {given.grad_accum} and --batch-tokens {chosen.batch_tokens} are exclusive "
                          "(the batch sets the accumulation); give one")
    if chosen.profile in GPU_PROFILES:  # an unknown one is refused by validate
        profile = GPU_PROFILES[chosen.profile]
        parser.set_defaults(**{k: v for k, v in profile.items() if not (k == "grad_accum" and chosen.batch_tokens)})
    return validate(TrainConfig(**vars(parser.parse_args(argv))))
