"""Cases of training.sources that hold both sides of each rule: which split a file name says (every keyword of the
datasets library, every separator), a card's data_files in each of its forms, hidden and special parts, and how a
source is handed to Ray Data (JSON lines or not, Parquet or JSON, the files a Hub folder lists)."""

from __future__ import annotations

import re

import pytest

from training.sources import DataError, _hub_filesystem, hub_data_files, read_hub_dataset, read_source, split_of

# The datasets library's split names and separators (data_files.py SPLIT_KEYWORDS, NON_WORDS_CHARS) and its patterns
# for a split named in a file or folder name (KEYWORDS_IN_FILENAME_BASE_PATTERNS, KEYWORDS_IN_DIR_NAME_BASE_PATTERNS,
# fsspec >= 2023.12), matched with fsspec's glob as resolve_pattern does.
DATASETS_SPLIT_KEYWORDS = {"train": ["train", "training"], "validation": ["validation", "valid", "dev", "val"],
                           "test": ["test", "testing", "eval", "evaluation"]}
DATASETS_SEPARATORS = "-._ 0-9"
DATASETS_SPLIT_PATTERNS = ["**/{keyword}[{sep}]*", "**/*[{sep}]{keyword}[{sep}]*", "**/{keyword}/**",
                           "**/{keyword}[{sep}]*/**", "**/*[{sep}]{keyword}/**", "**/*[{sep}]{keyword}[{sep}]*/**"]


def datasets_split(path: str) -> str | None:
    """The split the datasets library's default patterns give a file, asked of fsspec's own glob translation."""
    from fsspec.utils import glob_translate

    for split, keywords in DATASETS_SPLIT_KEYWORDS.items():
        if any(re.match(glob_translate(p.format(keyword=k, sep=DATASETS_SEPARATORS)), path)
               for k in keywords for p in DATASETS_SPLIT_PATTERNS):
            return split
    return None


@pytest.mark.parametrize("path, split", [
    # Every keyword of every split, in a file name and in a folder name.
    ("train.jsonl", "train"), ("data/training-00000.parquet", "train"),
    ("validation.jsonl", "validation"), ("data/valid.parquet", "validation"), ("dev/part-0.jsonl", "validation"),
    ("data/val-00000-of-00001.parquet", "validation"),
    ("test.jsonl", "test"), ("testing/a.parquet", "test"), ("data/eval.jsonl", "test"), ("evaluation/x.json", "test"),
    # Every separator: '-', '.', '_', ' ' and digits.
    ("my_train_file.jsonl", "train"), ("data/the test set.jsonl", "test"), ("data/train2017.json", "train"),
    ("data/x0dev1.jsonl", "validation"),
    # A keyword inside a longer word is no split name.
    ("data/interval.parquet", None), ("devices.jsonl", None), ("contest/a.jsonl", None), ("trainer.jsonl", None),
])
def test_a_file_name_says_the_split_the_datasets_library_reads_in_it(path, split):
    assert datasets_split(path) == split  # the expected value is the datasets library's own answer
    assert split_of(path) == split


def test_files_numbered_against_a_split_name_are_split_not_all_train():
    # train0.jsonl and test0.jsonl are two splits for the datasets library (a digit separates a keyword): reading
    # them both as train would train on the test rows and refuse hf:...:test.
    files = ["data/test0.jsonl", "data/train0.jsonl", "data/train1.jsonl"]
    assert hub_data_files(files, None, "train") == ["data/train0.jsonl", "data/train1.jsonl"]
    assert hub_data_files(files, None, "test") == ["data/test0.jsonl"]
