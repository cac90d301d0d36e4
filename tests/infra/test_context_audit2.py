"""stacks/context.py: the spellings a `-c` value may take, and how the tools read cdk.json."""

from __future__ import annotations

import json

import pytest

from stacks.context import _parse, settings_from_context, settings_from_files
from stacks.settings import SettingsError
from tests.conftest import base_context


@pytest.mark.parametrize("raw, parsed", [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("Yes", True),
                                         ("false", False), ("0", False), ("no", False), (False, False)])
def test_each_boolean_spelling_reads_as_its_value(raw, parsed):
    assert _parse("gpu_node_taint", raw, bool) is parsed


@pytest.mark.parametrize("raw", ["on", "", "2"])
def test_another_word_is_no_boolean(raw):
    with pytest.raises(SettingsError, match=r"^gpu_node_taint: expected true or false, got "):
        _parse("gpu_node_taint", raw, bool)


def test_a_boolean_is_no_integer():
    # bool is an int in Python: cdk.json's `true` must not become a node count of 1.
    with pytest.raises(SettingsError, match=r"^gpu_node_count: expected an integer, got True$"):
        _parse("gpu_node_count", True, int)


@pytest.mark.parametrize("annotation, raw, parsed", [
    (tuple[str, ...] | None, "", ()),        # `-c endpoint_public_cidrs=` clears the list (and validation refuses it)
    (tuple[str, ...] | None, "none", None),  # unsets it
    (str | None, "", None),                  # an empty value unsets any other optional setting
    (str | None, "null", None),
    (tuple[str, ...] | None, '[" 10.0.0.0/8 ", "192.0.2.0/24"]', ("10.0.0.0/8", "192.0.2.0/24")),
])
def test_an_empty_value_clears_a_list_but_unsets_anything_else(annotation, raw, parsed):
    assert _parse("key", raw, annotation) == parsed


def test_the_cdk_cli_s_own_keys_are_not_settings():
    # `cdk acknowledge` writes acknowledged-issue-numbers into cdk.json's context; feature flags hold ':'.
    s = settings_from_context(base_context() | {"acknowledged-issue-numbers": [34892], "@aws-cdk/core:flag": True})
    assert s.stack_name == "EksFsdpEfa"


def test_an_override_without_a_key_is_refused(tmp_path):
    (tmp_path / "cdk.json").write_text(json.dumps({"context": base_context()}))
    with pytest.raises(SettingsError, match=r"^-c '=5': expected key=value$"):
        settings_from_files(tmp_path / "cdk.json", ["=5"])


def test_the_tools_can_read_auto_before_preflight_has_cached_a_zone(tmp_path):
    # Preflight reads the settings with resolve_lookups off: auto stays auto, and preflight finds the zones.
    (tmp_path / "cdk.json").write_text(json.dumps({"context": base_context() | {"gpu_availability_zone": "auto"}}))
    assert settings_from_files(tmp_path / "cdk.json", resolve_lookups=False).gpu_availability_zone == "auto"
    with pytest.raises(SettingsError, match=r"^gpu_availability_zone: auto takes the first zone preflight found"):
        settings_from_files(tmp_path / "cdk.json")
