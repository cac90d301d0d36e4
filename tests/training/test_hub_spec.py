"""hf: data specs with a revision and a config, read as the Hub lays datasets out."""

from __future__ import annotations

import pytest

from training.config import ConfigError, TrainConfig
from training.config_rules import validate
from training.sources import DataError, HubSpec, _hub_filesystem, hub_data_files, parse_hf_spec


@pytest.mark.parametrize("spec, expected", [
    ("hf:org/name", HubSpec("org/name")),
    ("hf:org/name:test", HubSpec("org/name", "test")),
    ("hf:org/name:default:train_sft", HubSpec("org/name", "train_sft", config="default")),
    ("hf:org/name@0a1b2c3:en:validation", HubSpec("org/name", "validation", config="en", revision="0a1b2c3")),
    ("hf:org/name@v1.2", HubSpec("org/name", revision="v1.2")),
    ("hf:org/name@refs/convert/parquet:default:train", HubSpec("org/name", "train", "default", "refs/convert/parquet")),
    ("hf:/data/saved:train", HubSpec("/data/saved", "train")),
])
def test_specs_name_repo_revision_config_and_split(spec, expected):
    assert parse_hf_spec(spec) == expected


def test_a_revision_pins_the_files_read():
    assert _hub_filesystem("org/name", "0a1b2c3")[1] == "datasets/org/name@0a1b2c3"
    # huggingface_hub's HfFileSystem reads a branch name holding '/' URL-encoded after the '@'.
    assert _hub_filesystem("org/name", "refs/convert/parquet")[1] == "datasets/org/name@refs%2Fconvert%2Fparquet"
    assert _hub_filesystem("org/name")[1] == "datasets/org/name"


CARD = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train-*.parquet
  - split: test
    path: en/test-*.parquet
- config_name: de
  default: true
  data_files:
  - split: train
    path: de/train-*.parquet
---
# A dataset
"""
FILES = ["en/train-00000.parquet", "en/test-00000.parquet", "de/train-00000.parquet", "README.md"]


def test_a_config_picks_its_own_files():
    assert hub_data_files(FILES, CARD, "train", "en") == ["en/train-00000.parquet"]
    assert hub_data_files(FILES, CARD, "test", "en") == ["en/test-00000.parquet"]


def test_without_a_config_the_cards_default_is_read():
    assert hub_data_files(FILES, CARD, "train") == ["de/train-00000.parquet"]


def test_an_unknown_config_names_the_cards_configs():
    with pytest.raises(DataError, match=r"--data: no config 'fr' in this dataset's card \(configs: en, de\)"):
        hub_data_files(FILES, CARD, "train", "fr")


def test_a_config_on_a_dataset_without_a_card_is_refused():
    with pytest.raises(DataError, match=r"no config 'en': this dataset has no card declaring configs"):
        hub_data_files(["train.jsonl"], None, "train", "en")


@pytest.mark.parametrize("data, message", [
    ("hf:org/name@bad rev:train", r"--data: 'hf:org/name@bad rev:train' must be hf:org/name\[@revision\]"),
    ("hf:/data/saved@v1:train", r"--data: 'hf:/data/saved@v1:train': a local folder has no revision or config"),
    ("hf:/data/saved:en:train", r"--data: 'hf:/data/saved:en:train': a local folder has no revision or config"),
])
def test_bad_specs_are_one_line(data, message):
    with pytest.raises(ConfigError, match=message):
        validate(TrainConfig(model="org/model", data=data))
