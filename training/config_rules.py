"""The rules a TrainConfig must meet: every one that needs no file and no network, each refusal one line naming
the option (ConfigError). Pure and offline: `cdk synth` runs validate on the RayJob's exact entrypoint, so a value
the trainer would refuse on the cluster is refused at synth."""

from __future__ import annotations

import dataclasses
import re

from training.config import (ATTENTIONS, AUTO, BUILTIN_MODELS, DATA_SUFFIXES, GPU_PROFILES, HF_DATA_SPEC, HF_SPEC_FORMS,
                             HUB_ARCHITECTURES, HUB_ID, LORA_ALL_LINEAR, MAX_GRAD_ACCUM, MAX_LORA_RANK, MAX_LOSS_CHUNK_TOKENS,
                             MAX_MICRO_BATCH, MAX_SEQ_LEN, MAX_STEPS, MAX_WORKERS, MODEL_MAX_POSITIONS, PRECISIONS,
                             RECOMPUTATION, REDUCE_DTYPES, SHARDINGS, SYNTHETIC_DATA, TEMPLATE_SUFFIXES, ConfigError,
                             TrainConfig, chat_template_is_file, grad_accum_for, option_flag)

# Paths and URIs reach a shell command line (the RayJob entrypoint): no spaces, quotes, $, ;, |, &, `.
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/:=@+,~-]+")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# S3 bucket naming rules: 3-63 characters, lower-case letters, digits, '.' and '-', letters or digits at the ends.
_S3_URI = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/.*)?")
# The old boolean --activation-checkpointing (cdk.json true/false, a bool in code): every layer, or none.
_OLD_RECOMPUTATION = {True: "full", False: "none", "true": "full", "false": "none"}


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
