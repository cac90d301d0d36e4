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


def test_a_card_without_split_names_skips_hidden_and_special_folders():
    # The datasets library's default patterns go through resolve_pattern too, which drops hidden parts and '__'
    # folders the pattern does not name (data_files.py): a checkout's .cache or __pycache__ is no training data.
    files = ["a.jsonl", ".cache/b.jsonl", "data/.c.jsonl", "__pycache__/d.jsonl", "__e.jsonl"]
    # '__' counts in folders only (PurePath(path).parent.parts): a file so named is data.
    assert hub_data_files(files, None, "train") == ["__e.jsonl", "a.jsonl"]


def test_data_files_inside_a_data_dir_are_what_the_split_reads_not_the_whole_folder():
    # With both, the datasets library reads data_files inside data_dir: other files of the folder are not read,
    # and a split the data_files do not declare is not there, whatever the folder's file names say.
    card = "---\nconfigs:\n- config_name: en\n  data_dir: en\n  data_files:\n  - split: train\n    path: part-*.jsonl\n---\n"
    files = ["en/part-0.jsonl", "en/notes.jsonl", "en/validation.jsonl"]
    assert hub_data_files(files, card, "train") == ["en/part-0.jsonl"]
    with pytest.raises(DataError, match=r"^--data: no 'validation' split in this dataset \(found: see its dataset card\)$"):
        hub_data_files(files, card, "validation")


def test_a_splits_path_may_be_a_list_of_patterns():
    # The card's `path` of a split is a pattern or a list of them (datasets' MetadataConfigs, data_files.py).
    card = ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path:\n    - a/*.jsonl\n"
            "    - b/*.jsonl\n  - split: test\n    path: c/*.jsonl\n---\n")
    files = ["a/0.jsonl", "b/0.jsonl", "c/0.jsonl"]
    assert hub_data_files(files, card, "train") == ["a/0.jsonl", "b/0.jsonl"]
    assert hub_data_files(files, card, "test") == ["c/0.jsonl"]


def test_a_local_hub_folder_under_home_is_read_from_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _hub_filesystem("~/datasets/sft")[1] == str(tmp_path / "datasets" / "sft")


@pytest.fixture
def ray_readers(monkeypatch):
    """Ray Data's readers replaced by ones that say what they were asked to read."""
    import ray.data

    monkeypatch.setattr(ray.data, "read_json", lambda paths, lines, **kw: ("json", paths, lines, kw.get("file_extensions")))
    monkeypatch.setattr(ray.data, "read_parquet", lambda paths, **kw: ("parquet", paths, kw.get("file_extensions")))


def hub_split(root, names: list[str], spec_tail: str):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text('{"text": "a record"}\n')
    return read_hub_dataset(f"hf:{root}{spec_tail}")


def test_a_hub_folders_split_reads_its_own_files(tmp_path, ray_readers):
    kind, paths, lines, _ = hub_split(tmp_path, ["data/train-0.jsonl", "data/test-0.jsonl"], ":test")
    assert (kind, paths, lines) == ("json", [f"{tmp_path}/data/test-0.jsonl"], True)


def test_a_hub_split_of_json_and_jsonl_files_is_not_read_as_lines(tmp_path, ray_readers):
    # A .json file holds one document (an array of records), which Ray reads only with lines=False.
    kind, paths, lines, _ = hub_split(tmp_path, ["train-0.json", "train-1.jsonl"], ":train")
    assert (kind, lines) == ("json", False) and len(paths) == 2


def test_a_hub_split_of_parquet_files_is_read_as_parquet(tmp_path, ray_readers):
    assert hub_split(tmp_path, ["train-0.parquet"], "")[:2] == ("parquet", [f"{tmp_path}/train-0.parquet"])


def test_a_hub_split_mixing_parquet_and_json_is_refused(tmp_path, ray_readers):
    with pytest.raises(DataError, match=r"'train' split mixes file formats; give one of its folders instead$"):
        hub_split(tmp_path, ["train-0.parquet", "train-1.jsonl"], ":train")


@pytest.mark.parametrize("path, expected", [
    ("s3://bucket/sft.jsonl", ("json", "s3://bucket/sft.jsonl", True, None)),
    ("/data/SFT.JSONL", ("json", "/data/SFT.JSONL", True, None)),
    ("/data/sft.json", ("json", "/data/sft.json", False, None)),  # one JSON document, not lines
    ("/data/sft.jsonl/", ("json", "/data/sft.jsonl/", True, None)),
    ("/data/sft.parquet", ("parquet", "/data/sft.parquet", None)),
    ("/data/folder", ("parquet", "/data/folder", ["parquet"])),  # a folder: its Parquet files
])
def test_a_source_goes_to_the_reader_of_its_format(ray_readers, path, expected):
    assert read_source(path) == expected


def test_a_folder_without_parquet_files_is_read_as_json_lines(monkeypatch):
    import ray.data

    def no_parquet(paths, **kw):
        raise ValueError("No input files found to read with the following file extensions: ['parquet']")

    monkeypatch.setattr(ray.data, "read_parquet", no_parquet)
    monkeypatch.setattr(ray.data, "read_json", lambda paths, lines, **kw: (paths, lines, kw.get("file_extensions")))
    assert read_source("/data/folder") == ("/data/folder", True, ["jsonl"])


@pytest.mark.parametrize("data_dir", ["en", "en/", "/en"])
def test_a_data_dir_is_its_folder_however_its_slashes_are_written(data_dir):
    card = f"---\nconfigs:\n- config_name: en\n  data_dir: {data_dir}\n- config_name: fr\n  data_dir: fr\n---\n"
    files = ["en/train.jsonl", "en/test.jsonl", "fr/train.jsonl"]
    assert hub_data_files(files, card, "train", "en") == ["en/train.jsonl"]


@pytest.mark.parametrize("data_dir", ["en", "en/"])
def test_data_files_inside_a_data_dir_written_with_a_slash_are_found(data_dir):
    card = f"---\nconfigs:\n- config_name: en\n  data_dir: {data_dir}\n  data_files:\n  - split: train\n    path: part-*.jsonl\n---\n"
    assert hub_data_files(["en/part-0.jsonl", "fr/part-0.jsonl"], card, "train") == ["en/part-0.jsonl"]


def test_a_hub_folders_card_chooses_its_files(tmp_path, ray_readers):
    # The card's data_files name the split's files; without reading the card, the file names would (test-*: test).
    (tmp_path / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                        "    path: test-*.jsonl\n---\n")
    kind, paths, lines, _ = hub_split(tmp_path, ["test-0.jsonl", "train-0.jsonl"], ":train")
    assert paths == [f"{tmp_path}/test-0.jsonl"]
