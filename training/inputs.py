"""Before Ray starts: the model and data exist where the options say, and LoRA's target modules exist in the
model, with a one-line error if not. Apart from the options (training/config.py), which stay pure and offline
for the synth.
"""

from __future__ import annotations

from training.config import (BUILTIN_MODELS, HF_DATA_SPEC, HUB_ARCHITECTURES, HUB_ID, SYNTHETIC_DATA, ConfigError,
                             TrainConfig, chat_template_is_file)


def check_inputs(c: TrainConfig) -> None:
    """Before Ray starts: the model and data exist where the options say, with a one-line error if not.

    Local paths are looked at on this machine (the driver: the head pod on the cluster, where
    pod paths are the same as on the workers), s3:// URIs with the machine's credentials.
    Hub ids are left to the download, which names what is missing.
    """
    from pathlib import Path

    def local(value: str) -> Path:
        return Path(value.removeprefix("file://")).expanduser()

    if c.model not in BUILTIN_MODELS and not c.model.startswith("s3://") and HUB_ID.fullmatch(c.model) is None:
        folder = local(c.model)
        if not (folder / "config.json").is_file():
            raise ConfigError(f"--model: {c.model!r} is not a folder with a config.json (a saved Hugging Face model)")
        max_positions = _local_max_positions(folder)
        if max_positions and c.seq_len > max_positions:
            raise ConfigError(f"--seq-len: {c.seq_len} exceeds the model's {max_positions} positions ({folder}/config.json)")
        import json

        from training.families import supported_architecture

        refusal = supported_architecture(json.loads((folder / "config.json").read_text()))
        if refusal:
            raise ConfigError(f"--model: {refusal}")
        if c.attention != "auto":  # a kernel the model's class lacks (training.model.check_attention)
            from training.model import model_config

            model_config(c)
    if c.model.startswith("s3://"):
        _check_s3("--model", c.model.rstrip("/") + "/config.json")
    elif c.lora_rank and HUB_ID.fullmatch(c.model) is None:  # a built-in or a local folder: its architecture is here
        from training.model import lora_config, model_config

        lora_config(c, model_config(c))  # the named target modules exist
    if c.chat_template is not None and chat_template_is_file(c.chat_template):
        if c.chat_template.startswith("s3://"):
            _check_s3("--chat-template", c.chat_template)
        elif not local(c.chat_template).is_file():
            raise ConfigError(f"--chat-template: {c.chat_template!r} is not a file on this machine")
    for option, value in (("--data", c.data), ("--val-data", c.val_data)):
        if value is None or value in SYNTHETIC_DATA:
            continue
        if value.startswith("s3://"):
            _check_s3(option, value)
            continue
        path = HF_DATA_SPEC.fullmatch(value).group("repo") if value.startswith("hf:") else value
        if value.startswith("hf:") and not path.startswith(("/", "./", "../", "~")):
            continue  # a Hub id: listing it names what is missing
        if not local(path).exists():
            raise ConfigError(f"{option}: {path!r} does not exist on this machine")


def check_hub_positions(c: TrainConfig) -> None:
    """--seq-len against the positions of a Hub model the trainer does not know (its config.json, the one
    file read here), before Ray starts: past them, the model would run on positions it never learned.
    A config.json that cannot be had (no such model, a gated one, no network and not in the cache) is
    refused in one line. Built-in models, known Hub ids and local folders are checked by the config's own rules."""
    if HUB_ID.fullmatch(c.model) is None or c.model in HUB_ARCHITECTURES:
        return
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(c.model, revision=c.model_revision, cache_dir=c.cache_dir)
    except (OSError, ValueError) as error:  # transformers' words for a missing, gated or unreachable model
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"--model: cannot read {c.model}'s config.json ({reason}); give a Hub model id that exists "
                          "and this machine can reach (or has in --cache-dir), or a local folder with a config.json"
                          ) from None
    positions = getattr(config, "max_position_embeddings", None)
    if positions and c.seq_len > positions:
        raise ConfigError(f"--seq-len: {c.seq_len} exceeds {c.model}'s {positions} positions (max_position_embeddings)")


def _local_max_positions(folder) -> int | None:
    import json

    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"--model: {folder}/config.json cannot be read: {error}") from None
    return config.get("max_position_embeddings")


def _check_s3(option: str, uri: str) -> None:
    """An object, or any object under a prefix (a folder), exists at this s3:// URI."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, key = uri.removeprefix("s3://").partition("/")
    try:
        found = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("KeyCount", 0) > 0
    except (ClientError, BotoCoreError) as error:  # credentials, permissions, a missing bucket: all end the run here
        raise ConfigError(f"{option}: cannot read {uri}: {str(error).splitlines()[0]}") from None
    if not found:
        raise ConfigError(f"{option}: {uri} does not exist")
