"""tools/cli.py: which of cdk's flags pass through CDK_ARGS (aws-cdk's own cli-type-registry.json: the global
options and those of synth, diff, deploy and destroy, with their aliases), what is refused without the cdk CLI,
and the settings read with or without resolving auto's zone."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import ROOT
from tools.cli import cdk_flags, parse, tool_parser, unknown_option

PROG = "python -m tools.watch"


def parser():
    return tool_parser(PROG, "Watch.")


def app_dir(tmp_path):
    """The app's cdk.json alone, without a cdk.context.json beside it (nothing looked up yet)."""
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    return str(tmp_path / "cdk.json")


@pytest.mark.parametrize("flag", [
    "--context-lines=5",  # diff's only
    "--validation",  # synth's only
    "--execute",  # deploy's only
    "--telemetry",  # the alias of version-reporting, a word
    "--changeset",  # the alias of diff's change-set
    "-q",  # the one-letter alias of quiet (synth, diff)
    "--no-version-reporting",  # a boolean's --no- form (yargs)
    "-R",  # deploy's negativeAlias of rollback: yargs reads it as --no-rollback
])
def test_each_cdk_command_and_alias_flag_is_kept_for_cdk(flag, tmp_path):
    _, rest, settings = parse(parser(), ["--cdk-json", app_dir(tmp_path), flag])
    assert settings is not None and rest == [flag]


def test_a_letter_cdk_does_not_declare_is_refused(tmp_path):
    _, rest, settings = parse(parser(), ["--cdk-json", app_dir(tmp_path), "-Z"])
    assert settings is None


def test_without_the_cdk_cli_there_are_no_cdk_flags(tmp_path):
    assert cdk_flags(tmp_path / "cli-type-registry.json") is None


def test_without_the_cdk_cli_any_other_option_is_refused_naming_make():
    assert unknown_option(parser(), ["--profile=dev"], None) == (
        f"unrecognized option --profile: {PROG} takes -c, --context, --cdk-json, and no cdk flags until `make` has "
        "installed the cdk CLI (node_modules)")


def test_a_value_that_is_no_option_is_never_refused():
    """An option starts with - or -- and a letter: a value such as a negative number is no option."""
    assert unknown_option(parser(), ["never", "dev", "-5", "-"], frozenset()) is None


def test_auto_zone_stays_auto_for_preflight_and_is_resolved_for_the_others(tmp_path, capsys):
    """Preflight reads the settings with resolve_lookups false: auto is what it looks up. The other tools resolve it
    from cdk.context.json, and refuse in one line naming the setting where preflight has not cached a zone."""
    cdk_json = app_dir(tmp_path)
    overrides = ["--cdk-json", cdk_json, "-c", "gpu_availability_zone=auto"]
    assert parse(parser(), overrides, resolve_lookups=False)[2].gpu_availability_zone == "auto"
    assert parse(parser(), overrides)[2] is None
    err = capsys.readouterr().err
    assert err.startswith("error: gpu_availability_zone: auto takes the first zone preflight found") and err.count("\n") == 1
