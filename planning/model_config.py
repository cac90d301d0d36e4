"""Where the planner finds a model's `config.json`: a local folder, the Hugging Face Hub or S3.

A Hub id (at its revision) or an s3:// model is looked up once, with the user's network and credentials,
and its shape fields are cached in `cdk.context.json` under `model-config:<model>@<revision>`, the way CDK
caches its own context lookups: the next synth, a reviewer's and CI's, read the cache and need no network.
`cdk context --reset <key>` (or deleting the entry) looks it up again. A local folder is read where it is.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from planning.workload import ModelShape

CONTEXT_FILE = "cdk.context.json"
# The project's cache: `cdk synth` passes it to the app as context, and a run planned by hand reads it too.
PROJECT_CONTEXT_FILE = Path(__file__).resolve().parent.parent / CONTEXT_FILE
KEY_PREFIX = "model-config:"
# What the planner and the trainer's family checks read; the rest of config.json stays out of the cache.
CACHED_FIELDS = ("architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
                 "attention_bias", "mlp_bias", "use_bias", "use_qkv_bias", "qk_layernorm", "use_qk_norm", "use_parallel_residual",
                 "max_position_embeddings", "logit_scale", "logits_scaling", "final_logit_softcapping")
HOW_TO_GIVE_IT = ("give a local folder holding config.json, or run the synth once with network access (and AWS "
                  "credentials for s3://) so it is cached in cdk.context.json")


class ModelConfigError(ValueError):
    """The model's config.json could not be read; the message says how to give it."""


class UnsupportedFamily(ModelConfigError):
    """The config was read, and the trainer does not train the model's family (the trainer's own words)."""


def context_key(model: str, revision: str | None) -> str:
    return f"{KEY_PREFIX}{model}@{revision or 'main'}" if not model.startswith("s3://") else f"{KEY_PREFIX}{model}"


def shape_fields(config: dict) -> dict:
    return {k: config[k] for k in CACHED_FIELDS if k in config}


def hub_token() -> str | None:
    """The user's Hub token where huggingface_hub looks for it (utils/_auth.py get_token; the synth runs without
    that package): HF_TOKEN, then HUGGING_FACE_HUB_TOKEN, then the file `hf auth login` writes, HF_TOKEN_PATH or
    $HF_HOME/token (HF_HOME: $XDG_CACHE_HOME/huggingface, by default ~/.cache/huggingface)."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
        path = Path(os.path.expandvars(os.path.expanduser(os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token"))))
        try:
            token = path.read_text()
        except OSError:  # not logged in
            return None
    return token.replace("\r", "").replace("\n", "").strip() or None


def hub_config_url(model: str, revision: str | None) -> str:
    """config.json's URL on the Hub (huggingface_hub's hf_hub_url: the revision quoted whole, so refs/pr/1 is one part)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return f"{endpoint}/{model}/resolve/{urllib.parse.quote(revision or 'main', safe='')}/config.json"


def _fetch_hub(model: str, revision: str | None) -> dict:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise OSError("HF_HUB_OFFLINE is set")
    request = urllib.request.Request(hub_config_url(model, revision))
    token = hub_token()
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _fetch_s3(model: str) -> dict:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, prefix = model.removeprefix("s3://").partition("/")
    key = f"{prefix.rstrip('/')}/config.json" if prefix else "config.json"
    try:
        return json.loads(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    except (BotoCoreError, ClientError) as error:  # no credentials, access denied, no such key
        raise OSError(f"s3://{bucket}/{key}: {error}") from None


def _fetch(model: str, revision: str | None) -> dict:
    return _fetch_s3(model) if model.startswith("s3://") else _fetch_hub(model, revision)


def is_local(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~"))


def lookup(model: str, revision: str | None, context: dict,
           fetch: Callable[[str, str | None], dict] | None = None) -> tuple[dict, dict]:
    """The model's shape fields, and the context entries to cache (empty when nothing was looked up).
    ModelConfigError in one line when the config can't be read."""
    if is_local(model):
        path = Path(model).expanduser() / "config.json"
        try:
            return shape_fields(json.loads(path.read_text())), {}
        except (OSError, ValueError) as error:
            raise ModelConfigError(f"--model: cannot read {path} here ({getattr(error, 'strerror', None) or error}); the "
                                   "planner sizes a local model from its config.json on the machine that plans the run"
                                   ) from None
    key = context_key(model, revision)
    if key in context:
        return context[key], {}
    try:
        fields = shape_fields((fetch or _fetch)(model, revision))
    except (OSError, ValueError, urllib.error.URLError) as error:
        raise ModelConfigError(f"--model: {model}'s config.json is not cached under {key!r} in "
                               f"{CONTEXT_FILE} and could not be looked up ({error}); {HOW_TO_GIVE_IT}") from None
    return fields, {key: fields}


def save(entries: dict, context_file: Path) -> None:
    """Add looked-up entries to cdk.context.json, keeping what CDK cached there (same JSON layout as CDK's)."""
    if not entries:
        return
    current = json.loads(context_file.read_text()) if context_file.exists() else {}
    context_file.write_text(json.dumps(current | entries, indent=2, sort_keys=True) + "\n")


def model_shape(model: str, revision: str | None, context: dict,
                fetch: Callable[[str, str | None], dict] | None = None) -> tuple["ModelShape", dict]:
    """The planner's shape of `model`: the built-in configurations and their Qwen2.5 hub ids from the table the
    calibration was measured on, any other model counted from its config.json (looked up, or cached in context).
    Returns the shape and the context entries to cache. ModelConfigError / ShapeError in one line otherwise."""
    from planning.families import count_shape
    from planning.workload import MODELS, ModelShape
    from training.config import HUB_ARCHITECTURES
    from training.families import supported_architecture

    known = MODELS.get(HUB_ARCHITECTURES.get(model, model))
    if known is not None:
        return known, {}
    fields, new = lookup(model, revision, context, fetch)
    refusal = supported_architecture(fields)
    if refusal:
        raise UnsupportedFamily(f"--model: {refusal}")
    return ModelShape(**count_shape(fields, model)), new


def project_context() -> dict:
    return json.loads(PROJECT_CONTEXT_FILE.read_text()) if PROJECT_CONTEXT_FILE.exists() else {}
