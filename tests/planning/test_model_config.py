"""planning.model_config: where the planner reads a model's config.json, and the cdk.context.json cache."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from planning.families import count_shape
from planning.model_config import ModelConfigError, context_key, lookup, save

ROOT = Path(__file__).resolve().parents[2]
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 96, "vocab_size": 256, "rope_theta": 10000.0, "torch_dtype": "bfloat16"}


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: the cache must answer."""
    def refuse(*args, **kwargs):
        raise AssertionError("a test touched the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)


def unreachable(model, revision):
    raise AssertionError(f"looked up {model}@{revision} although it was cached")


def test_committed_cache_holds_the_default_model(no_network):
    context = json.loads((ROOT / "cdk.context.json").read_text())
    default = json.loads((ROOT / "cdk.json").read_text())["context"]
    fields, new = lookup(default["training"]["model"], default["training"].get("model_revision"), context, unreachable)
    shape = count_shape(fields)
    # Qwen2.5-1.5B: 1,543,714,304 parameters (its model card, and DESIGN's figure).
    assert (shape["layer_params"] + shape["root_params"], new) == (1_543_714_304, {})


def test_hub_key_names_model_and_revision():
    assert context_key("meta-llama/Llama-3.2-1B", None) == "model-config:meta-llama/Llama-3.2-1B@main"
    assert context_key("org/m", "0123abc") == "model-config:org/m@0123abc"


def test_s3_key_is_the_uri():
    assert context_key("s3://bucket/models/m", None) == "model-config:s3://bucket/models/m"


def test_cached_entry_is_used_without_lookup(no_network):
    context = {"model-config:org/m@abc": LLAMA}
    assert lookup("org/m", "abc", context, unreachable) == (LLAMA, {})


def test_other_revision_is_looked_up_and_returned_for_the_cache():
    seen = []

    def fetch(model, revision):
        seen.append((model, revision))
        return LLAMA

    fields, new = lookup("org/m", "def", {"model-config:org/m@abc": {}}, fetch)
    # Only shape fields are cached: rope_theta and torch_dtype stay out.
    assert (seen, new) == ([("org/m", "def")], {"model-config:org/m@def": {k: v for k, v in LLAMA.items()
                                                                             if k not in ("rope_theta", "torch_dtype")}})


def test_local_folder_is_read_in_place(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    fields, new = lookup(str(tmp_path), None, {}, unreachable)
    assert (fields["hidden_size"], new) == (64, {})


def test_local_folder_without_config_says_how_to_give_it(tmp_path):
    with pytest.raises(ModelConfigError, match=r"^--model: cannot read .*config.json here \(No such file or directory\); the planner sizes a local model"):
        lookup(str(tmp_path), None, {}, unreachable)


def test_failed_lookup_is_one_line_naming_the_key():
    def offline(model, revision):
        raise OSError("Network is unreachable")

    with pytest.raises(ModelConfigError) as error:
        lookup("org/m", None, {}, offline)
    assert "\n" not in str(error.value)
    assert "'model-config:org/m@main'" in str(error.value) and "Network is unreachable" in str(error.value)


@mock_aws
def test_s3_model_read_with_the_users_credentials(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="models")
    s3.put_object(Bucket="models", Key="llama/config.json", Body=json.dumps(LLAMA).encode())
    fields, new = lookup("s3://models/llama", None, {})
    assert new == {"model-config:s3://models/llama": fields} and fields["num_hidden_layers"] == 2


@mock_aws
def test_s3_model_missing_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    boto3.client("s3").create_bucket(Bucket="models")
    with pytest.raises(ModelConfigError, match=r"^--model: s3://models/none's config.json is not cached .*NoSuchKey"):
        lookup("s3://models/none", None, {})


def test_save_keeps_cdks_own_entries(tmp_path):
    context_file = tmp_path / "cdk.context.json"
    context_file.write_text(json.dumps({"availability-zones:account=1:region=r": ["a", "b"]}))
    save({"model-config:org/m@main": LLAMA}, context_file)
    assert json.loads(context_file.read_text()) == {"availability-zones:account=1:region=r": ["a", "b"],
                                                    "model-config:org/m@main": LLAMA}


def test_a_qwen_hub_id_keeps_the_calibrated_shape(no_network):
    from planning.model_config import model_shape
    from planning.workload import MODELS

    assert model_shape("Qwen/Qwen2.5-7B-Instruct", None, {}, unreachable) == (MODELS["qwen2.5-7b"], {})


def test_another_hub_model_is_counted_from_its_cached_config(no_network):
    from planning.model_config import model_shape

    # Llama-3.2-1B's published config.json (hub, meta-llama/Llama-3.2-1B): 1,235,814,400 parameters, the count
    # its model card gives as 1.24B and transformers builds.
    llama = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256,
             "tie_word_embeddings": True}
    shape, new = model_shape("meta-llama/Llama-3.2-1B", "4e20de3", {"model-config:meta-llama/Llama-3.2-1B@4e20de3": llama},
                             unreachable)
    assert (shape.params, shape.layers, shape.heads, shape.head_dim, new) == (1_235_814_400, 16, 32, 64, {})


def hub_request_headers(monkeypatch, revision=None) -> dict:
    """The headers _fetch_hub sends, captured instead of a connection."""
    import io
    import urllib.request

    from planning import model_config

    sent = {}

    def urlopen(request, timeout):
        sent.update(url=request.full_url, headers=dict(request.header_items()))
        return io.BytesIO(json.dumps(LLAMA).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    model_config._fetch_hub("meta-llama/Llama-3.2-1B", revision)
    return sent


def test_a_hub_login_token_is_sent_for_gated_models(monkeypatch, tmp_path):
    # `hf auth login` writes the token to $HF_HOME/token; huggingface_hub's get_token reads it when HF_TOKEN is unset.
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    (tmp_path / "token").write_text("hf_fromlogin\n")
    assert hub_request_headers(monkeypatch)["headers"]["Authorization"] == "Bearer hf_fromlogin"


def test_hf_token_wins_over_the_login_file(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    (tmp_path / "token").write_text("hf_fromlogin")
    monkeypatch.setenv("HF_TOKEN", "hf_fromenv")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub_request_headers(monkeypatch)["headers"]["Authorization"] == "Bearer hf_fromenv"


def test_no_token_sends_no_authorization(monkeypatch, tmp_path):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert "Authorization" not in hub_request_headers(monkeypatch)["headers"]


@pytest.mark.parametrize("revision", ["main", "0123abc", "refs/pr/1", "v1.0"])
def test_the_config_url_is_huggingface_hubs(monkeypatch, revision):
    from huggingface_hub import hf_hub_url  # the reference: the URL huggingface_hub itself downloads config.json from

    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    expected = hf_hub_url("meta-llama/Llama-3.2-1B", "config.json", revision=revision)
    assert hub_request_headers(monkeypatch, revision)["url"] == expected


def test_a_hub_revision_is_read_from_that_revision_s_config(monkeypatch):
    # The Hub serves a file at a revision as {endpoint}/{repo}/resolve/{revision}/{file} (huggingface_hub's
    # hf_hub_url); a pinned commit must not be sized from main's config.
    import io
    import urllib.request

    asked = []

    def urlopen(request, timeout):
        asked.append(request.full_url)
        return io.BytesIO(json.dumps(LLAMA).encode())

    for name in ("HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    lookup("org/m", "0123abc", {})
    assert asked == ["https://huggingface.co/org/m/resolve/0123abc/config.json"]
