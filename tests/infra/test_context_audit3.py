"""stacks/context.py: cdk.context.json, the lookups `make preflight` caches, as the app reads it."""

from __future__ import annotations

import pytest

from stacks.context import cached_lookups
from stacks.settings import SettingsError


def test_a_context_file_that_is_not_json_is_refused_in_one_line_naming_the_file(tmp_path):
    # A half-written cdk.context.json must stop synth with what to do, not a JSONDecodeError traceback.
    broken = tmp_path / "cdk.context.json"
    broken.write_text('{"spot-price:us-west-2:g6.12xlarge": ')
    with pytest.raises(SettingsError, match=r"cdk\.context\.json: cannot be read as JSON \(Expecting value: line 1 "
                                            r"column 38 \(char 37\)\); fix it or delete it$"):
        cached_lookups(broken)


def test_a_context_file_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    broken = tmp_path / "cdk.context.json"
    broken.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(SettingsError, match=r"cdk\.context\.json: cannot be read as JSON .*; fix it or delete it$"):
        cached_lookups(broken)


@pytest.mark.parametrize("text, entries", [('{"k": {"zones": ["a"]}}', {"k": {"zones": ["a"]}}), ("[1, 2]", {})])
def test_a_context_file_gives_its_object_and_nothing_for_another_json_value(tmp_path, text, entries):
    (tmp_path / "cdk.context.json").write_text(text)
    assert cached_lookups(tmp_path / "cdk.context.json") == entries


def test_no_context_file_gives_no_entries(tmp_path):
    assert cached_lookups(tmp_path / "cdk.context.json") == {}
