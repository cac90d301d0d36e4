"""tools/cli.py's parse wiring: the -c overrides and cdk.json reach the settings, and lookups are resolved only when
the tool asks."""

from __future__ import annotations

import shutil

from tools.cli import parse, tool_parser

from tests.conftest import ROOT


def test_lookups_left_unresolved_keep_auto_as_it_is(tmp_path):
    """Preflight, deploy and teardown run before (or without) the lookup that auto stands for."""
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    _, _, s = parse(tool_parser("t", "doc"), ["--cdk-json", str(tmp_path / "cdk.json"), "-c",
                                              "gpu_availability_zone=auto"], resolve_lookups=False)
    assert s.gpu_availability_zone == "auto"


def test_lookups_are_resolved_by_default_and_auto_with_none_cached_is_refused(tmp_path, capsys):
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    _, _, s = parse(tool_parser("t", "doc"), ["--cdk-json", str(tmp_path / "cdk.json"), "-c",
                                              "gpu_availability_zone=auto"])
    assert s is None
    assert "gpu_availability_zone" in capsys.readouterr().err


def test_the_overrides_and_the_other_arguments_reach_their_places(tmp_path):
    shutil.copy(ROOT / "cdk.json", tmp_path / "cdk.json")
    _, rest, s = parse(tool_parser("t", "doc"), ["--cdk-json", str(tmp_path / "cdk.json"), "-c", "gpu_node_count=4",
                                                 "-c", "system_node_count=2", "--force"])
    assert (s.gpu_node_count, s.system_node_count, rest) == (4, 2, ["--force"])
