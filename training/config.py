"""Run settings of the trainer: the option vocabulary and one dataclass, TrainConfig, whose fields are its options.

Its command line is training/command_line.py; the rules a value must meet, training/config_rules.py (pure and
offline: `cdk synth` runs them on the RayJob's exact entrypoint, so a value the trainer would refuse on the cluster
is refused at synth). training/inputs.py looks for the model and data where they live, on the machine that starts
the run, before Ray starts.
"""

from __future__ import annotations

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
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}")
# hf:org/name[@revision][[:config]:split] or hf:/folder[:split]; training.data reads the same spec. A
# config comes only before a split (hf:org/name:config:split), so hf:org/name:split keeps its meaning.
HF_DATA_SPEC = re.compile(r"hf:(?P<repo>[^:@]+?)(?:@(?P<revision>[A-Za-z0-9][\w./-]{0,127}))?"
                          r"(?::(?P<config>[A-Za-z0-9_.-]+)(?=:[^:]+$))?(?::(?P<split>[A-Za-z0-9_.-]+))?")
HF_SPEC_FORMS = "hf:org/name[@revision][:config]:split or hf:/folder[:split]"


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
# the optimisation (training.driver.refuse_changed_resume). The world size is not among them: the global
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


TEMPLATE_SUFFIXES = (".jinja", ".j2", ".txt")


def chat_template_is_file(value: str) -> bool:
    """--chat-template names a file (a template suffix, or a path or s3:// URI), else a Hub model id."""
    return value.endswith(TEMPLATE_SUFFIXES) or value.startswith(("/", ".", "~", "s3://", "file://"))


def grad_accum_for(batch_tokens: int, workers: int, micro_batch: int, seq_len: int) -> int:
    """Micro-batches per worker per step that make batch_tokens; ConfigError (one line, the nearest
    valid batches) when the workers' micro-batches cannot add up to it."""
    per_round = workers * micro_batch * seq_len
    if batch_tokens < 1 or batch_tokens % per_round or batch_tokens // per_round > MAX_GRAD_ACCUM:
        rounds = batch_tokens // per_round  # the suggestions stay within 1 .. MAX_GRAD_ACCUM rounds
        below, above = min(max(rounds, 1), MAX_GRAD_ACCUM) * per_round, (rounds + 1) * per_round
        nearest = f"{below:,} or {above:,}" if below < batch_tokens and rounds < MAX_GRAD_ACCUM else f"{below:,}"
        raise ConfigError(f"--batch-tokens: {batch_tokens:,} is not a multiple of {workers} workers (--workers) x "
                          f"{micro_batch} sequences (--micro-batch) x {seq_len:,} tokens (--seq-len) = {per_round:,} "
                          f"(at most {MAX_GRAD_ACCUM:,} times); nearest valid: {nearest}")
    return batch_tokens // per_round


def option_flag(name: str) -> str:
    return "--" + name.replace("_", "-")
