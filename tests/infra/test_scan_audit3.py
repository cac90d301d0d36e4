"""tools/scan.py's edges no other test of the module ran: checkov printing no JSON, files checkov could not parse,
a bad option refused in one line, and a deploy-time value of no known intrinsic."""

from __future__ import annotations

import json
import subprocess

import pytest

from tools import scan


def _checkov(tmp_path, monkeypatch, stdout: str, stderr: str = "", returncode: int = 0):
    executable = tmp_path / "checkov"
    executable.write_text("")
    monkeypatch.setattr(scan.subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(
        command, returncode, stdout, stderr))
    return str(executable)


def test_checkov_printing_no_json_is_refused_with_its_exit_status_and_stderr_tail(tmp_path, monkeypatch):
    checkov = _checkov(tmp_path, monkeypatch, "", "x" * 400 + "ModuleNotFoundError: No module named 'checkov'\n", 1)
    with pytest.raises(scan.ScanError, match=r"^checkov printed no JSON report \(exit 1\): x+ModuleNotFoundError: "
                                             r"No module named 'checkov'$") as raised:
        scan.run_checkov(checkov, tmp_path)
    assert len(str(raised.value).split(": ", 1)[1]) == 300  # the tail, not the whole stderr


def test_files_checkov_could_not_parse_are_named_by_file(tmp_path, monkeypatch, capsys):
    report = {"check_type": "kubernetes", "results": {"passed_checks": [], "failed_checks": [],
                                                      "parsing_errors": [str(tmp_path / "job-job-1.yaml"),
                                                                         str(tmp_path / "sa-ray.yaml")]}}
    checkov = _checkov(tmp_path, monkeypatch, json.dumps([report]))
    assert scan.run_checkov(checkov, tmp_path) == []
    assert capsys.readouterr().err == "checkov could not parse: job-job-1.yaml, sa-ray.yaml\n"


def test_an_unknown_option_is_refused_in_one_line_with_status_2(capsys):
    with pytest.raises(SystemExit) as raised:
        scan.main(["--no-such-option"])
    assert raised.value.code == 2
    assert capsys.readouterr().err == "error: unrecognized arguments: --no-such-option\n"


def test_a_value_of_no_known_shape_is_a_deploy_time_placeholder():
    assert scan.placeholder(["a", "b"]) == "<deploy-time-value>"
    assert scan.placeholder({"Fn::Sub": "x", "Ref": "y"}) == "<deploy-time-value>"
    assert scan.placeholder({"Fn::Sub": "x"}) == "<Fn::Sub>"
