"""planning.model_config: where the Hub token is found (huggingface_hub's utils/_auth.py get_token and constants.py
HF_HOME) and which S3 key a model's config.json is read from."""

from __future__ import annotations

import io
import json
import sys
from types import SimpleNamespace

import pytest

from planning import model_config

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "XDG_CACHE_HOME")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in TOKEN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_hf_token_wins_over_the_older_variable(clean_env):
    # huggingface_hub: os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN").
    clean_env.setenv("HF_TOKEN", "hf_new")
    clean_env.setenv("HUGGING_FACE_HUB_TOKEN", "hf_old")
    assert model_config.hub_token() == "hf_new"


def test_the_login_file_is_found_under_xdg_cache_home(clean_env, tmp_path):
    # huggingface_hub: HF_HOME defaults to $XDG_CACHE_HOME/huggingface, and `hf auth login` writes HF_HOME/token.
    (tmp_path / "xdg" / "huggingface").mkdir(parents=True)
    (tmp_path / "xdg" / "huggingface" / "token").write_text("hf_xdg\n")
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_config.hub_token() == "hf_xdg"


@pytest.mark.parametrize("model,key", [("s3://bucket/models/qwen", "models/qwen/config.json"),
                                       ("s3://bucket/models/qwen/", "models/qwen/config.json"),
                                       ("s3://bucket", "config.json")])
def test_an_s3_models_config_is_read_from_the_prefixs_config_json(monkeypatch, model, key):
    asked = []

    def get_object(Bucket, Key):  # noqa: N803 (boto3's argument names)
        asked.append((Bucket, Key))
        return {"Body": io.BytesIO(json.dumps({"model_type": "qwen2"}).encode())}

    monkeypatch.setitem(sys.modules, "boto3", SimpleNamespace(client=lambda service: SimpleNamespace(get_object=get_object)))
    assert model_config._fetch_s3(model) == {"model_type": "qwen2"}
    assert asked == [("bucket", key)]


@pytest.mark.parametrize("model", ["../a", "./b/../a"])
def test_a_relative_folder_is_read_where_it_is(monkeypatch, tmp_path, model):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64, "other": 1}))
    monkeypatch.chdir(tmp_path / "b" if model.startswith("..") else tmp_path)

    def no_lookup(model, revision):
        raise AssertionError("a local folder must not be looked up on the Hub")

    assert model_config.lookup(model, None, {}, no_lookup) == ({"model_type": "qwen2", "hidden_size": 64}, {})


def test_save_writes_the_entries_looked_up_over_older_ones_and_keeps_the_rest(tmp_path):
    context = tmp_path / "cdk.context.json"
    context.write_text(json.dumps({"model-config:m@main": {"hidden_size": 1}, "availability-zones:x": ["a"]}))
    model_config.save({"model-config:m@main": {"hidden_size": 2}}, context)
    assert json.loads(context.read_text()) == {"model-config:m@main": {"hidden_size": 2}, "availability-zones:x": ["a"]}


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_hf_hub_offline_in_any_of_huggingface_hubs_true_spellings_looks_nothing_up(monkeypatch, value):
    # huggingface_hub's constants._is_true: "1", "ON", "YES", "TRUE" in any case.
    def urlopen(*args, **kwargs):
        raise AssertionError("offline: no request may be made")

    monkeypatch.setattr(model_config.urllib.request, "urlopen", urlopen)
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    with pytest.raises(OSError, match="HF_HUB_OFFLINE is set"):
        model_config._fetch_hub("org/model", None)


@pytest.mark.parametrize("raw,token", [("hf_ab\n", "hf_ab"), ("hf_a\r\nb", "hf_ab"), (" \n", None)])
def test_the_token_is_cleaned_as_huggingface_hub_cleans_it(clean_env, raw, token):
    # huggingface_hub's _clean_token: every CR and LF removed, then stripped; empty is no token.
    clean_env.setenv("HF_TOKEN", raw)
    assert model_config.hub_token() == token
