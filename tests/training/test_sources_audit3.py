"""sources.py's rarer paths: a malformed hf: spec, a card with no configs, glob brackets that are not a class (as
Python's fnmatch reads them, which fsspec's glob follows), and a Hub folder that cannot be listed."""

import fnmatch
from types import SimpleNamespace

import pytest

from training import sources
from training.sources import DataError, configured_data_files, card_config, glob_regex, parse_hf_spec


@pytest.mark.parametrize("spec", ["hf:", "hf:org/name:a:b:c", "hf:org/name@:train"])
def test_a_malformed_hub_spec_names_the_setting_and_its_forms(spec):
    with pytest.raises(DataError, match=rf"^--data: {spec!r} must be hf:org/name\[@revision\]\[:config\]:split or "
                                        r"hf:/folder\[:split\]$"):
        parse_hf_spec(spec)


def test_a_well_formed_hub_spec_is_split_into_its_parts():
    assert parse_hf_spec("hf:org/name@v1.0:en:test") == sources.HubSpec("org/name", "test", "en", "v1.0")
    assert parse_hf_spec("hf:org/name") == sources.HubSpec("org/name", "train", None, None)


@pytest.mark.parametrize("readme", ["no front matter", "---\nlicense: mit\n---\n", "---\nconfigs: []\n---\n"])
def test_a_card_that_declares_no_config_gives_no_patterns(readme):
    """None, not []: no config means the folder's files split by name; [] would be a split with no files."""
    assert card_config(readme) is None
    assert configured_data_files(readme, "train") is None


@pytest.mark.parametrize("pattern", ["data[1.jsonl", "data[^a].jsonl", "data[[a].jsonl", "data[!a].jsonl",
                                     "data[a-c].jsonl"])
@pytest.mark.parametrize("name", ["data[1.jsonl", "data1.jsonl", "dataa.jsonl", "datab.jsonl", "data^.jsonl",
                                  "data[.jsonl", "data!.jsonl", "data[a].jsonl"])
def test_bracket_patterns_match_as_fnmatch_reads_them(pattern, name):
    assert bool(glob_regex(pattern).match(name)) == fnmatch.fnmatchcase(name, pattern)


def test_a_hub_folder_that_cannot_be_listed_is_refused_in_one_line(monkeypatch):
    def refuse(root):
        raise OSError("403 Forbidden: gated dataset\nsee the Hub's page")

    monkeypatch.setattr(sources, "_hub_filesystem", lambda repo, revision=None: (SimpleNamespace(find=refuse), "r"))
    with pytest.raises(DataError, match=r"^--data: cannot list hf:org/gated: 403 Forbidden: gated dataset$"):
        sources.read_hub_dataset("hf:org/gated")


def test_an_hf_source_is_read_through_the_hub_reader(monkeypatch):
    monkeypatch.setattr(sources, "read_hub_dataset", lambda spec: ("hub", spec))
    assert sources.read_source("hf:org/name:test") == ("hub", "hf:org/name:test")
