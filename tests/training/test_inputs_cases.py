"""Cases of training.inputs that hold each option's side of the checks: a missing s3:// object is refused naming the
option that gave it (--val-data, --chat-template, not --data), and a known Hub model's positions are the trainer's
own figures, never a download."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from training.config import ConfigError, TrainConfig
from training.config_rules import validate
from training.inputs import check_hub_positions, check_inputs
from tests.conftest import fake_aws_credentials


@pytest.fixture
def s3(monkeypatch):
    import boto3
    from moto import mock_aws

    fake_aws_credentials(monkeypatch)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="data-bucket")
        client.put_object(Bucket="data-bucket", Key="data/train.jsonl", Body=b'{"text": "a"}\n')
        yield client


def test_missing_s3_validation_data_is_refused_naming_val_data(s3):
    with pytest.raises(ConfigError, match=r"^--val-data: s3://data-bucket/data/val.jsonl does not exist$"):
        check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/data/train.jsonl",
                                          val_data="s3://data-bucket/data/val.jsonl")))


def test_missing_s3_chat_template_is_refused_naming_chat_template(s3):
    with pytest.raises(ConfigError, match=r"^--chat-template: s3://data-bucket/chat.jinja does not exist$"):
        check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/data/train.jsonl",
                                          chat_template="s3://data-bucket/chat.jinja")))


def test_an_s3_chat_template_that_exists_passes(s3):
    s3.put_object(Bucket="data-bucket", Key="chat.jinja", Body=b"{{ messages }}")
    check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/data/train.jsonl",
                                      chat_template="s3://data-bucket/chat.jinja")))


def hub_config(monkeypatch, from_pretrained) -> None:
    """transformers' AutoConfig stood in for (no download in tests, and no import of transformers for it)."""
    monkeypatch.setitem(sys.modules, "transformers", SimpleNamespace(AutoConfig=SimpleNamespace(from_pretrained=from_pretrained)))


@pytest.mark.parametrize("model, looked_up", [("Qwen/Qwen2.5-7B-Instruct", False), ("org/unknown-model", True)])
def test_only_a_hub_model_the_trainer_does_not_know_is_looked_up(monkeypatch, model, looked_up):
    # A known Hub model's positions are in the trainer's own tables (checked by the config's rules): no config.json is
    # fetched for it, so a driver without network access starts.
    asked = []

    def from_pretrained(name, **_):
        asked.append(name)
        return SimpleNamespace(max_position_embeddings=32768)

    hub_config(monkeypatch, from_pretrained)
    check_hub_positions(TrainConfig(model=model, seq_len=1024))
    assert asked == ([model] if looked_up else [])


def test_a_hub_models_config_is_read_at_the_revision_and_cache_given(monkeypatch):
    asked = {}

    def from_pretrained(name, **kwargs):
        asked.update(kwargs)
        return SimpleNamespace(max_position_embeddings=32768)

    hub_config(monkeypatch, from_pretrained)
    check_hub_positions(TrainConfig(model="org/unknown-model", model_revision="0a1b2c3", cache_dir="/cache"))
    assert asked == {"revision": "0a1b2c3", "cache_dir": "/cache"}


@pytest.mark.parametrize("option", ["data", "val_data", "chat_template"])
def test_a_local_path_under_home_is_found_there(tmp_path, monkeypatch, option):
    # '~' is the home folder of the user who runs the driver: the file there exists.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "f.jsonl").write_text('{"text": "a"}\n')
    check_inputs(TrainConfig(**{"model": "o/m", "data": "~/f.jsonl", option: "~/f.jsonl"}))
