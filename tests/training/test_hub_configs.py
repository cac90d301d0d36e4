"""Hub datasets with several configs, as the datasets library reads a card's YAML `configs`: the one
named, else the one marked default (or named "default"), else the only one; several and no default is
refused listing them (datasets raises "Config name is missing"), as are two defaults and a config without a
name. A config given by `data_dir` holds the files under that folder, split by their names. The card's
data_files patterns match as fsspec's glob, which the datasets library resolves them with. Checked on local
folders in the Hub's layout, and on lists of files."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("data_files", ["data/*.jsonl", "\n  - data/*.jsonl"])
def test_plain_data_files_are_the_train_split_only(tmp_path, data_files):
    """A config's data_files given as a pattern or a list of patterns, not per split: the datasets library makes
    them the train split alone (data_files.py sanitize_patterns: SANITIZED_DEFAULT_SPLIT, "train"). A validation
    split read from them would measure validation loss on the training rows."""
    card = f"---\nconfigs:\n- config_name: sft\n  data_files: {data_files}\n---\n"
    files, card = hub_folder(tmp_path, card, ["data/a.jsonl", "data/b.jsonl"])
    assert hub_data_files(files, card, "train") == ["data/a.jsonl", "data/b.jsonl"]
    with pytest.raises(DataError, match=r"^--data: no 'validation' split in this dataset \(found: see its dataset card\)$"):
        hub_data_files(files, card, "validation")


# ---------------------------------------------------------------- which config is the default (item: several configs)

def test_a_config_named_default_is_the_default_without_being_marked(tmp_path):
    # datasets' MetadataConfigs.get_default_config_name: the only config, or one named "default", or one marked so.
    card = ("---\nconfigs:\n- config_name: en\n  data_dir: en\n- config_name: default\n  data_dir: all\n"
            "- config_name: fr\n  data_dir: fr\n---\n")
    files, card = hub_folder(tmp_path, card, ["en/train.jsonl", "all/train.jsonl", "fr/train.jsonl"])
    assert hub_data_files(files, card, "train") == ["all/train.jsonl"]


def test_a_config_named_default_and_another_marked_default_are_refused_as_datasets_refuses(tmp_path):
    # datasets raises "Dataset has several default configs: 'default' and 'fr'".
    card = ("---\nconfigs:\n- config_name: default\n  data_dir: all\n- config_name: fr\n  data_dir: fr\n"
            "  default: true\n---\n")
    files, card = hub_folder(tmp_path, card, ["all/train.jsonl", "fr/train.jsonl"])
    with pytest.raises(DataError, match=r"^--data: this dataset's card has several default configs \(default, fr\)"):
        hub_data_files(files, card, "train")


def test_a_config_without_a_name_is_refused_as_datasets_refuses(tmp_path):
    # datasets' MetadataConfigs.from_dataset_card_data: "Each config must include `config_name` field".
    card = "---\nconfigs:\n- data_files: '*.jsonl'\n---\n"
    files, card = hub_folder(tmp_path, card, ["train.jsonl"])
    with pytest.raises(DataError, match=r"^--data: the dataset card declares a config without a config_name"):
        hub_data_files(files, card, "train")


# ---------------------------------------------------------------- data_files patterns, as fsspec's glob matches them

GLOB_FILES = ["train.parquet", "old/stale.parquet", "data/train-00000.parquet", "data/train-00001.parquet",
              "data/en/train-00000.parquet", "data/en/deep/train-00000.parquet", "valid.parquet", "data/b1.parquet"]


def card_with(pattern: str) -> str:
    return f"---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: '{pattern}'\n---\n"


def test_a_star_stays_inside_its_folder(tmp_path):
    files, card = hub_folder(tmp_path, card_with("*.parquet"), ["train.parquet", "old/stale.parquet"])
    assert hub_data_files(files, card, "train") == ["train.parquet"]


@pytest.mark.parametrize("pattern, expected", [
    ("**/*.parquet", GLOB_FILES),  # '**' spans any number of folders, none included
    ("data/*", ["data/b1.parquet", "data/train-00000.parquet", "data/train-00001.parquet"]),
    ("data/**", ["data/b1.parquet", "data/en/deep/train-00000.parquet", "data/en/train-00000.parquet",
                 "data/train-00000.parquet", "data/train-00001.parquet"]),
    ("data/**/train-*.parquet", ["data/en/deep/train-00000.parquet", "data/en/train-00000.parquet",
                                 "data/train-00000.parquet", "data/train-00001.parquet"]),
    ("*/*/train-0000?.parquet", ["data/en/train-00000.parquet"]),
    ("data/[!t]*.parquet", ["data/b1.parquet"]),
    ("[a-u]*.parquet", ["train.parquet"]),
])
def test_patterns_pick_what_fsspecs_glob_picks(pattern, expected):
    # Expected by hand from fsspec's rules; fsspec's own translation (what datasets' resolve_pattern globs with)
    # is asked as well, so that the list above is its answer.
    from fsspec.utils import glob_translate

    assert sorted(f for f in GLOB_FILES if re.match(glob_translate(pattern), f)) == sorted(expected)
    assert hub_data_files(GLOB_FILES, card_with(pattern), "train") == sorted(expected)


def test_a_question_mark_is_one_character_of_a_name_never_a_slash():
    # fsspec's glob (what datasets' resolve_pattern uses): '?' is one character other than '/'.
    from fsspec.utils import glob_translate

    files = ["data/a-b.parquet", "data/a/b.parquet"]
    assert [f for f in files if re.match(glob_translate("data/a?b.parquet"), f)] == ["data/a-b.parquet"]
    assert hub_data_files(files, card_with("data/a?b.parquet"), "train") == ["data/a-b.parquet"]


def test_hidden_and_special_folders_are_read_only_when_the_pattern_names_them():
    # datasets' resolve_pattern drops hidden files and folders (a name starting with '.') and folders starting
    # with '__' that the pattern does not name.
    files = ["data/a.parquet", "data/.draft.parquet", ".cache/data/b.parquet", "__pycache__/c.parquet"]
    assert hub_data_files(files, card_with("**"), "train") == ["data/a.parquet"]
    assert hub_data_files(files, card_with(".cache/**"), "train") == [".cache/data/b.parquet"]
    assert hub_data_files(files, card_with("data/.*"), "train") == ["data/.draft.parquet"]


def test_a_double_star_inside_a_name_is_refused_as_fsspec_refuses_it():
    with pytest.raises(DataError, match=r"^--data: the dataset card's pattern 'data/\*\*\.parquet' has '\*\*' inside"):
        hub_data_files(GLOB_FILES, card_with("data/**.parquet"), "train")


@pytest.mark.parametrize("pattern, expected", [
    # datasets' data_files.py FILES_TO_IGNORE: config.json, dataset_info.json, dataset_infos.json and
    # dataset_dict.json (with README.md and dummy_data.zip) are skipped unless the pattern's last component is that
    # very name; a glob that matches them does not take them.
    ("**", ["data/train.json"]),
    ("data/*.json", ["data/train.json"]),
    ("data/config.json", ["data/config.json"]),
    ("data/dataset_info.json", ["data/dataset_info.json"]),
])
def test_metadata_files_are_not_data_unless_the_pattern_names_them(pattern, expected):
    files = ["data/train.json", "data/config.json", "data/dataset_info.json", "data/dataset_infos.json",
             "data/dataset_dict.json"]
    assert hub_data_files(files, card_with(pattern), "train") == expected


def test_a_saved_datasets_metadata_is_not_read_as_a_split_without_a_card():
    # A folder saved by datasets' save_to_disk holds dataset_dict.json and dataset_info.json beside its data.
    files = ["train/data.json", "train/dataset_info.json", "dataset_dict.json"]
    assert hub_data_files(files, None, "train") == ["train/data.json"]

