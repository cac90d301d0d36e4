"""stacks/context.py: cdk.context.json, the lookups `make preflight` caches, as the app reads it."""

from __future__ import annotations

import json

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


def test_a_list_setting_given_a_number_is_refused_as_a_list():
    # endpoint_public_cidrs is an optional list: its one arm's own refusal, not a generic one.
    from stacks.context import settings_from_context
    from tests.conftest import base_context

    with pytest.raises(SettingsError, match=r"^endpoint_public_cidrs: expected a list of strings, got 5$"):
        settings_from_context(base_context() | {"endpoint_public_cidrs": 5})


def test_a_cdk_owned_key_of_cdk_json_is_no_unknown_setting():
    # `cdk migrate` writes "cdk-migrate": true into cdk.json's context; it is CDK's, not a typo of a setting.
    from stacks.context import settings_from_context
    from tests.conftest import base_context

    assert settings_from_context(base_context() | {"cdk-migrate": True}).region == "us-east-2"


def test_cdk_json_wins_over_cdk_context_json_for_the_same_key(tmp_path):
    # The CDK CLI reads context from -c, then cdk.json, then cdk.context.json (aws-cdk Configuration's Context bags,
    # first found wins): a ranking pinned in cdk.json is the one auto takes.
    from stacks.context import settings_from_files
    from tests.conftest import base_context

    key = "gpu-zones:us-east-2:g6.12xlarge:on-demand"
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "python3 app.py", "context": base_context() | {
        "gpu_availability_zone": "auto", key: {"zones": ["us-east-2b"], "basis": "pinned"}}}))
    (tmp_path / "cdk.context.json").write_text(json.dumps({key: {"zones": ["us-east-2a"], "basis": "probe"}}))
    assert settings_from_files(tmp_path / "cdk.json").gpu_availability_zone == "us-east-2b"


def test_a_cli_value_may_hold_an_equals_sign(tmp_path):
    # `-c key=value` splits at the first '=' (the CDK CLI's own split): a tag value "a=b" stays whole.
    from stacks.context import settings_from_files
    from tests.conftest import base_context

    (tmp_path / "cdk.json").write_text(json.dumps({"app": "python3 app.py", "context": base_context()}))
    assert settings_from_files(tmp_path / "cdk.json", ['tags={"team": "ml=core"}']).tags == {"team": "ml=core"}
