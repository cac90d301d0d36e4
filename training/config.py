"""Run settings of the trainer: one dataclass, its command line, and its validation."""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass

# Built-in model configurations: random init, no download (benchmarks, tests, smoke runs).
BUILTIN_MODELS = ("qwen2.5-1.5b", "tiny")
# Data sources that need no files: uniform random token ids, or a learnable pattern.
SYNTHETIC_DATA = ("random", "pattern")
# Per-GPU settings measured to fit and run fast (docs/benchmarks.md); --profile NAME applies
# one, and any option given explicitly still wins. The cluster's defaults are the l4 profile.
GPU_PROFILES: dict[str, dict] = {
    # H100/H200 (80 GB and more): no recomputation, large micro-batches, gathered weights kept.
    "h200": {"seq_len": 4096, "micro_batch": 8, "activation_checkpointing": False, "compile": True,
             "loss_chunk_tokens": 8192, "reshard_after_forward": False},
    # L4 (g6.12xlarge, 24 GB): recompute each layer, one sequence at a time.
    "l4": {"seq_len": 2048, "micro_batch": 1, "grad_accum": 4, "activation_checkpointing": True, "compile": True,
           "loss_chunk_tokens": 2048},
}


class ConfigError(ValueError):
    """A bad option; the message is one line that names it and what is allowed."""


@dataclass
class TrainConfig:
    """Everything one training run needs; every field is a --option of the same name."""

    model: str = "tiny"
    """Hub id (org/name), local or s3:// folder, or a built-in config: qwen2.5-1.5b, tiny."""
    steps: int = 100
    """Optimizer steps."""
    seq_len: int = 512
    """Tokens per sequence."""
    micro_batch: int = 4
    """Sequences per worker per forward/backward."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
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
    activation_checkpointing: bool = False
    """Recompute each decoder layer in backward: less memory, about 1/3 more compute."""
    compile: bool = False
    """torch.compile each decoder layer (GPU)."""
    loss_chunk_tokens: int = 8192
    """Tokens per chunk of the fused head + cross-entropy (its bf16 logits: chunk x vocab x 2 bytes)."""
    reshard_after_forward: bool = True
    """Free each layer's gathered weights after forward (re-gathered in backward): less memory.
    Off: they stay gathered through backward and through all of a step's micro-batches."""
    profile: str | None = None
    """Apply a GPU profile's settings first: h200 or l4 (explicit options still win)."""
    data: str = "pattern"
    """random, pattern, or a JSONL/Parquet file or folder (local path or s3://)."""
    text_field: str = "text"
    """Field holding plain text; records with a `messages` list use the chat template instead."""
    storage_path: str = "runs"
    """Where checkpoints and the run summary go: a local folder or s3://bucket/prefix."""
    run_name: str = "run"
    """Run name; a rerun with the same storage path and name resumes from its latest checkpoint."""
    checkpoint_every: int = 0
    """Steps between checkpoints (0: only at the end)."""
    max_failures: int = 0
    """Worker-group restarts from the last checkpoint that Ray Train may make."""
    workers: int = 2
    """Training workers (one per GPU on a cluster)."""
    local: bool = False
    """Start a local Ray instead of joining a cluster."""
    gpu: bool | None = None
    """Train on GPUs (default: when the cluster or machine has them)."""
    require_efa: bool = False
    """Fail in the first minute when inter-node NCCL traffic does not use EFA."""
    seed: int = 0
    """Seed of initialisation and synthetic data."""
    log_every: int = 1
    """Steps between log lines (other steps make no host sync)."""
    peak_tflops: float | None = None
    """Per-GPU bf16 peak for MFU; default from the GPU's name."""
    export_hf: bool = False
    """At the end, save the model in Hugging Face format (safetensors) from rank 0."""
    cache_dir: str | None = None
    """Hugging Face cache (on the cluster: the node-local volume shared by a pod's workers)."""
    inject_failure_at_step: int | None = None
    """Testing recovery: worker rank 1 (or 0 alone) exits once at this step."""

    @property
    def tokens_per_step_per_worker(self) -> int:
        return self.micro_batch * self.grad_accum * self.seq_len


def validate(c: TrainConfig) -> TrainConfig:
    def require(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    require(c.steps >= 1, f"--steps: {c.steps} must be a positive integer")
    require(c.seq_len >= 8 and c.seq_len <= 131072, f"--seq-len: {c.seq_len} must be between 8 and 131072")
    require(c.micro_batch >= 1, f"--micro-batch: {c.micro_batch} must be at least 1")
    require(c.grad_accum >= 1, f"--grad-accum: {c.grad_accum} must be at least 1")
    require(0 < c.lr < 1, f"--lr: {c.lr} must be in (0, 1)")
    require(0 <= c.min_lr_ratio <= 1, f"--min-lr-ratio: {c.min_lr_ratio} must be in [0, 1]")
    require(0 <= c.warmup_steps, f"--warmup-steps: {c.warmup_steps} must be 0 or more")
    require(c.weight_decay >= 0, f"--weight-decay: {c.weight_decay} must be 0 or more")
    require(c.grad_clip >= 0, f"--grad-clip: {c.grad_clip} must be 0 or more")
    require(c.checkpoint_every >= 0, f"--checkpoint-every: {c.checkpoint_every} must be 0 or more")
    require(c.max_failures >= -1, f"--max-failures: {c.max_failures} must be -1 (unlimited) or more")
    require(c.loss_chunk_tokens >= 1, f"--loss-chunk-tokens: {c.loss_chunk_tokens} must be at least 1")
    require(c.profile is None or c.profile in GPU_PROFILES,
            f"--profile: {c.profile!r} is not one of {', '.join(GPU_PROFILES)}")
    require(c.workers >= 1, f"--workers: {c.workers} must be at least 1")
    require(c.log_every >= 1, f"--log-every: {c.log_every} must be at least 1")
    require(c.peak_tflops is None or c.peak_tflops > 0, f"--peak-tflops: {c.peak_tflops} must be positive")
    require(re.fullmatch(r"[\w.-]+", c.run_name) is not None,
            f"--run-name: {c.run_name!r} may hold only letters, digits, '.', '_' and '-'")
    require(c.model in BUILTIN_MODELS or c.model.startswith(("/", "./", "s3://")) or re.fullmatch(r"[\w.-]+/[\w.-]+", c.model) is not None,
            f"--model: {c.model!r} is not a built-in ({', '.join(BUILTIN_MODELS)}), a hub id org/name, or a path")
    scheme = c.storage_path.split("://")[0] if "://" in c.storage_path else None
    require(scheme in (None, "s3", "file") and c.storage_path.strip() != "",
            f"--storage-path: {c.storage_path!r} must be a local folder, file:// or s3://bucket/prefix")
    if c.data not in SYNTHETIC_DATA:
        scheme = c.data.split("://")[0] if "://" in c.data else None
        require(scheme in (None, "s3", "file"),
                f"--data: {c.data!r} must be random, pattern, a local path, file:// or s3://")
    require(c.inject_failure_at_step is None or 1 <= c.inject_failure_at_step <= c.steps,
            f"--inject-failure-at-step: {c.inject_failure_at_step} must be between 1 and --steps")
    return c


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m training.train",
        description="Fine-tune a causal LM with FSDP2 under Ray Train (laptop, GPU box or EKS).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    docs = _field_docs()
    for f in dataclasses.fields(TrainConfig):
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        help_text = docs.get(f.name, "")
        if kind.startswith("bool"):
            parser.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                                default=f.default, help=help_text)
            continue
        base = {"int": int, "float": float, "str": str}[kind.split(" ")[0]]
        parser.add_argument(_flag(f.name), dest=f.name, type=_typed(base, f.name), default=f.default, help=help_text)
    return parser


def _typed(base: type, name: str):
    def parse(text: str):
        try:
            return base(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_flag(name)}: {text!r} is not {'an integer' if base is int else 'a number'}") from None

    parse.__name__ = base.__name__
    return parse


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


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    parser = build_parser()
    chosen, _ = parser.parse_known_args(argv)
    if chosen.profile in GPU_PROFILES:  # an unknown one is refused by validate
        parser.set_defaults(**GPU_PROFILES[chosen.profile])
    return validate(TrainConfig(**vars(parser.parse_args(argv))))
