"""A dataset card's config given as a folder (data_dir) whose files carry no split name: the datasets library
reads them all as the train split, as it reads a dataset with no card, and has no other split."""

import pytest

from training.sources import DataError, hub_data_files

CARD = "---\nconfigs:\n- config_name: en\n  data_dir: en\n- config_name: fr\n  data_dir: fr\n---\n"
FILES = ["en/part-0.jsonl", "en/part-1.jsonl", "fr/part-0.jsonl"]


def test_a_data_dir_config_without_split_names_is_all_train():
    assert hub_data_files(FILES, CARD, "train", "en") == ["en/part-0.jsonl", "en/part-1.jsonl"]


def test_a_data_dir_config_without_split_names_has_no_validation_split():
    with pytest.raises(DataError, match=r"^--data: no 'validation' split in this dataset \(found: \['train'\]\)$"):
        hub_data_files(FILES, CARD, "validation", "en")
