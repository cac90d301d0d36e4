"""tools/locked_install.py case by case: which of two distributions sharing a file goes in last, whatever order
they are listed in, and the command line's exit statuses."""

from __future__ import annotations

import pytest

from tools import locked_install


class FakeDist:
    """What install_order reads of an importlib.metadata.Distribution: its files, requirements and name."""

    def __init__(self, name: str, files: list[str], requires: list[str] | None = None):
        self.files, self.requires, self.metadata = files, requires or [], {"Name": name}


SHARED = "aws_cdk/cloud_assembly_schema/__init__.py"
LIB = FakeDist("aws-cdk-lib", [SHARED, "aws_cdk/__init__.py"], ["aws-cdk.cloud-assembly-schema>=48", "jsii>=1.1"])
SCHEMA = FakeDist("aws-cdk.cloud-assembly-schema", [SHARED], ["jsii>=1.1"])
JSII = FakeDist("jsii", ["jsii/__init__.py"])


@pytest.mark.parametrize("listed", [["aws-cdk-lib", "aws-cdk-cloud-assembly-schema", "jsii"],
                                    ["aws-cdk-cloud-assembly-schema", "aws-cdk-lib", "jsii"]])
def test_the_dependent_goes_after_its_dependency_in_either_listed_order(listed):
    # pip installs a dependency before its dependent, so the dependent's copy of the shared file is the one left:
    # aws-cdk-lib (which requires the schema) goes after it, whichever of the two the environment lists first.
    by_name = {"aws-cdk-lib": LIB, "aws-cdk-cloud-assembly-schema": SCHEMA, "jsii": JSII}
    dists = {name: by_name[name] for name in listed}
    assert locked_install.install_order(dists) == {"aws-cdk-lib": "aws-cdk.cloud-assembly-schema"}


@pytest.mark.parametrize("listed", [["top", "bottom", "middle"], ["bottom", "top", "middle"]])
def test_a_dependency_through_another_distribution_counts(listed):
    # top requires middle, which requires bottom; top and bottom share a file: top goes in after bottom.
    by_name = {"top": FakeDist("top", ["shared.py"], ["middle"]), "middle": FakeDist("middle", ["m.py"], ["bottom"]),
               "bottom": FakeDist("bottom", ["shared.py"])}
    assert locked_install.install_order({name: by_name[name] for name in listed}) == {"top": "bottom"}


def test_two_distributions_sharing_a_file_without_a_dependency_are_refused_naming_the_file():
    dists = {"a": FakeDist("a", ["pkg/x.py"]), "b": FakeDist("b", ["pkg/x.py"])}
    with pytest.raises(ValueError, match="pkg/x.py: installed by a and b, neither of which depends on the other"):
        locked_install.install_order(dists)


def test_a_requirement_behind_an_extra_is_no_dependency():
    # pip installs `b` for `a` only with a[extra]: without it the order of a and b is not theirs to set.
    dists = {"a": FakeDist("a", ["pkg/x.py"], ['b; extra == "speed"']), "b": FakeDist("b", ["pkg/x.py"])}
    with pytest.raises(ValueError, match="neither of which depends on the other"):
        locked_install.install_order(dists)


@pytest.mark.parametrize("path", ["../../bin/tool", "a-1.0.dist-info/LICENSE", "pkg/__pycache__/x.cpython-311.pyc"])
def test_scripts_metadata_and_bytecode_two_distributions_share_set_no_order(path):
    # Files outside site-packages (scripts), dist-info entries and bytecode are no module whose copy matters.
    dists = {"a": FakeDist("a", [path, "a.py"]), "b": FakeDist("b", [path, "b.py"])}
    assert locked_install.install_order(dists) == {}


def test_a_bad_lock_line_is_one_error_line_and_exit_status_2(tmp_path, capsys):
    lock = tmp_path / "lock.txt"
    lock.write_text("nosuch-a==1.0\n")
    assert locked_install.main(["install", str(lock), "dev"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {lock}:1: expected ")


@pytest.mark.parametrize("argv", [["install", "lock.txt", "all"], ["install", "lock.txt"], ["lock", "a", "b"], []])
def test_a_wrong_command_line_prints_the_usage_and_exits_2(argv, capsys):
    assert locked_install.main(argv) == 2
    assert capsys.readouterr().err.startswith("usage: python -m tools.locked_install install LOCK synth|dev")


@pytest.mark.parametrize("failing", ["nosuch-a", "nosuch-b"])
def test_a_failed_pip_on_either_side_is_the_exit_status(tmp_path, monkeypatch, failing):
    # The Makefile falls back to a plain pip install only when the locked install exits non-zero: a failure on
    # the side that finishes second must count as much as one on the first.
    lock = tmp_path / "lock.txt"
    lock.write_text("nosuch-a==1.0  # dev 9 MB\nnosuch-b==2.0  # dev 5 MB\n")

    class Pip:
        def __init__(self, command):
            self.status = 3 if open(command[-1]).read().startswith(failing) else 0

        def wait(self):
            return self.status

    monkeypatch.setattr(locked_install.subprocess, "Popen", Pip)
    assert locked_install.install(lock, "dev") == 3
