"""Hub datasets with several configs, as the datasets library reads a card's YAML `configs`: the one
named, else the one marked default (or named "default"), else the only one; several and no default is
refused listing them (datasets raises "Config name is missing"). A config given by `data_dir` holds the
files under that folder, split by their names. Checked on local folders in the Hub's layout."""

from __future__ import annotations

import pytest

from training.sources import DataError, _hub_filesystem, hub_data_files

TWO_FOLDERS = ("---\nconfigs:\n- config_name: en\n  data_dir: en\n- config_name: fr\n  data_dir: fr\n---\n# Two languages\n")


def hub_folder(root, card: str, files: list[str]) -> tuple[list[str], str]:
    """A dataset folder in the Hub's layout, listed as read_hub_dataset lists it: (files, card)."""
    (root / "README.md").write_text(card)
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text('{"text": "a record"}\n')
    fs, base = _hub_filesystem(str(root))
    return [f[len(base) + 1:] for f in fs.find(base)], card


def test_several_configs_and_no_default_are_refused_listing_them(tmp_path):
    files, card = hub_folder(tmp_path, TWO_FOLDERS, ["en/train.jsonl", "fr/train.jsonl"])
    with pytest.raises(DataError, match=r"several configs and none is the default.*\(configs: en, fr\)$"):
        hub_data_files(files, card, "train")


def test_a_data_dir_config_reads_its_own_folders_splits(tmp_path):
    files, card = hub_folder(tmp_path, TWO_FOLDERS, ["en/train.jsonl", "en/validation.jsonl", "fr/train.jsonl"])
    assert hub_data_files(files, card, "train", "en") == ["en/train.jsonl"]
    assert hub_data_files(files, card, "validation", "en") == ["en/validation.jsonl"]
    assert hub_data_files(files, card, "train", "fr") == ["fr/train.jsonl"]


def test_the_config_marked_default_is_read_when_none_is_named(tmp_path):
    card = TWO_FOLDERS.replace("- config_name: fr\n", "- config_name: fr\n  default: true\n")
    files, card = hub_folder(tmp_path, card, ["en/train.jsonl", "fr/train.jsonl"])
    assert hub_data_files(files, card, "train") == ["fr/train.jsonl"]


def test_a_sole_config_is_the_default(tmp_path):
    card = "---\nconfigs:\n- config_name: sft\n  data_files:\n  - split: train\n    path: sft/*.jsonl\n---\n"
    files, card = hub_folder(tmp_path, card, ["sft/a.jsonl", "other/b.jsonl"])
    assert hub_data_files(files, card, "train") == ["sft/a.jsonl"]


def test_data_files_inside_a_data_dir_are_read_from_it(tmp_path):
    card = ("---\nconfigs:\n- config_name: en\n  data_dir: en\n  data_files:\n  - split: train\n    path: part-*.jsonl\n"
            "- config_name: fr\n  data_dir: fr\n---\n")
    files, card = hub_folder(tmp_path, card, ["en/part-0.jsonl", "en/part-1.jsonl", "fr/part-0.jsonl"])
    assert hub_data_files(files, card, "train", "en") == ["en/part-0.jsonl", "en/part-1.jsonl"]
