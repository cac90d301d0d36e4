"""requirements-lock.txt against the requirement files and what pip installed for them, and the two-pip install
(tools/locked_install.py)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT
from tools import locked_install
from tools.locked_install import Pin

LOCK = ROOT / "requirements-lock.txt"


def pinned(path) -> dict[str, str]:
    """name -> version of each `name==version` line of a requirements file and the files it includes."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r"):
            pins |= pinned(path.parent / line[2:].strip())
        elif line:
            requirement = Requirement(line)
            (version,) = [s.version for s in requirement.specifier if s.operator == "=="]
            pins[canonicalize_name(requirement.name)] = version
    return pins


def locked() -> dict[str, Pin]:
    return {canonicalize_name(pin.name): pin for pin in locked_install.read_lock(LOCK)}


@pytest.mark.parametrize("requirements", ["requirements.txt", "requirements-dev.txt"])
def test_every_pin_of_the_requirement_files_is_locked_at_its_version(requirements):
    lock = locked()
    for name, version in pinned(ROOT / requirements).items():
        # == ignores a local label: torch==2.13.0 is the 2.13.0+cpu build pip takes here.
        assert name in lock and Requirement(f"{name}=={version}").specifier.contains(lock[name].version), name


def test_every_locked_distribution_is_the_version_installed_here():
    for name, pin in locked().items():
        assert importlib.metadata.version(pin.name) == pin.version, f"{name}: run make lock"


def test_the_lock_holds_exactly_what_the_requirement_files_pull_in_and_marks_synths_share():
    lock = locked()
    assert set(lock) == set(locked_install.closure(ROOT / "requirements-dev.txt"))
    assert {name for name, pin in lock.items() if pin.set == "synth"} == set(locked_install.closure(ROOT / "requirements.txt"))


def test_the_synth_set_holds_the_cdk_and_its_published_dependencies_but_not_the_trainer():
    synth = {name for name, pin in locked().items() if pin.set == "synth"}
    # aws-cdk-lib 2.275.0's metadata: constructs, jsii, publication, typeguard and its asset packages.
    assert {"aws-cdk-lib", "constructs", "jsii", "publication", "typeguard"} <= synth
    assert not {"torch", "ray", "transformers", "pytest"} & synth


def test_an_extra_pulls_in_what_it_names_and_only_it(tmp_path):
    # moto 5.2.5's metadata: its 'server' extra requires flask and flask-cors; moto alone requires neither.
    plain, server = tmp_path / "plain.txt", tmp_path / "server.txt"
    plain.write_text("moto==5.2.5\n")
    server.write_text("moto[server]==5.2.5\n")
    assert "flask-cors" not in locked_install.closure(plain)
    assert {"flask", "flask-cors"} <= set(locked_install.closure(server))


def test_an_include_is_followed(tmp_path):
    (tmp_path / "base.txt").write_text("# a comment\nPyYAML==6.0.4  # with a trailing comment\n")
    (tmp_path / "top.txt").write_text("-r base.txt\npytest==9.2.0\n")
    assert locked_install.requirement_lines(tmp_path / "top.txt") == ["PyYAML==6.0.4", "pytest==9.2.0"]


def test_a_lock_line_without_its_set_and_size_is_refused_naming_it(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("# header\nrequests==2.0.0  # dev 1 MB, after urllib3\nurllib3==2.0.0\n")
    with pytest.raises(ValueError, match=re.escape(
            "lock.txt:3: expected 'name==version  # synth|dev N MB[, after NAME]', got 'urllib3==2.0.0'")):
        locked_install.read_lock(lock)


def test_a_lock_line_reads_back_as_written():
    pin = Pin("aws-cdk-lib", "2.275.0", "synth", 418, "aws-cdk.cloud-assembly-schema")
    assert pin.line() == "aws-cdk-lib==2.275.0  # synth 418 MB, after aws-cdk.cloud-assembly-schema"
    assert locked_install.LINE.match(pin.line())["after"] == "aws-cdk.cloud-assembly-schema"


def test_the_halves_take_the_largest_first_each_to_the_lighter_side():
    pins = [Pin(name, "1", "dev", mb) for name, mb in (("c", 232), ("a", 757), ("e", 176), ("b", 418), ("d", 200))]
    first, second = locked_install.halves(pins)
    # 757 -> first; 418 -> second; 232 -> second (418 < 757); 200 -> second (650 < 757); 176 -> first (757 < 850).
    assert [[p.name for p in r] for r in first] == [["a", "e"]] and [[p.name for p in r] for r in second] == [["b", "c", "d"]]


def test_a_pin_after_another_goes_on_its_side_a_round_later():
    pins = [Pin("aws-cdk-lib", "1", "synth", 418, "aws-cdk.cloud-assembly-schema"), Pin("jsii", "1", "synth", 5),
            Pin("aws-cdk.cloud-assembly-schema", "1", "synth", 1), Pin("constructs", "1", "synth", 1)]
    first, second = locked_install.halves(pins)
    # aws-cdk-lib (418) waits for the schema; jsii (5) -> first; the schema (1) -> second (0 < 5); aws-cdk-lib
    # now: the schema's side, a round later (second: 419); constructs (1) -> first (5 < 419).
    assert [[p.name for p in r] for r in first] == [["jsii", "constructs"]]
    assert [[p.name for p in r] for r in second] == [["aws-cdk.cloud-assembly-schema"], ["aws-cdk-lib"]]


def test_a_pin_after_one_installed_already_goes_in_the_first_round():
    first, second = locked_install.halves([Pin("aws-cdk-lib", "1", "synth", 418, "aws-cdk.cloud-assembly-schema")])
    assert [[p.name for p in r] for r in first] == [["aws-cdk-lib"]] and second == [[]]


def test_afters_that_lead_back_are_refused():
    with pytest.raises(ValueError, match="the 'after' of a leads back to it"):
        locked_install.halves([Pin("a", "1", "dev", 2, "b"), Pin("b", "1", "dev", 1, "a")])


def test_every_file_two_distributions_install_holds_the_copy_of_the_one_pip_installs_last():
    """RECORD holds each file's hash as its distribution installed it; pip installs a dependency before what
    depends on it, so a file both install must hold the dependent's bytes (a lock installed in another order left
    aws_cdk/cloud_assembly_schema/__init__.py from aws-cdk.cloud-assembly-schema: jsii then failed to find types)."""
    import base64
    import hashlib

    lock = locked()
    owners: dict[str, list] = {}
    for name in lock:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or []:
            if file.hash and not str(file).startswith(".."):
                owners.setdefault(str(file), []).append((name, file))
    shared = {path: found for path, found in owners.items() if len(found) > 1}
    assert "aws_cdk/cloud_assembly_schema/__init__.py" in shared
    for path, found in shared.items():
        last = [name for name, _ in found if lock[name].after]
        assert len(last) == 1, path
        (record,) = [file for name, file in found if name == last[0]]
        digest = base64.urlsafe_b64encode(hashlib.sha256(record.read_binary()).digest()).rstrip(b"=").decode()
        assert digest == record.hash.value, f"{path} holds another distribution's copy than {last[0]}'s"


def test_the_lock_says_which_of_two_distributions_sharing_a_file_goes_in_last():
    # aws-cdk-lib 2.275.0 requires aws-cdk.cloud-assembly-schema, and both install that module's __init__.py.
    assert locked()["aws-cdk-lib"].after == "aws-cdk.cloud-assembly-schema"
    assert locked_install.install_order(locked_install.closure(ROOT / "requirements-dev.txt")) == {
        "aws-cdk-lib": "aws-cdk.cloud-assembly-schema"}


def test_the_synth_set_leaves_out_devs_pins_and_anything_installed_at_its_version():
    pins = [Pin("pytest", importlib.metadata.version("pytest"), "dev", 3), Pin("pytest", "0.1", "dev", 3),
            Pin("nosuch-dist", "1.0", "dev", 1), Pin("nosuch-synth", "1.0", "synth", 1)]
    assert locked_install.chosen(pins, "synth") == [pins[3]]
    assert locked_install.chosen(pins, "dev") == pins[1:]


def fake_pips(monkeypatch, exit_status: int) -> list[tuple[list[str], str]]:
    """subprocess.Popen as install() starts pip: each pip's command and its listing (read at the start: the folder
    goes when install returns), each pip ending with exit_status."""
    started = []

    class Pip:
        def __init__(self, command):
            started.append((command, open(command[-1]).read()))

        def wait(self):
            return exit_status

    monkeypatch.setattr(subprocess, "Popen", Pip)
    return started


def test_install_runs_both_sides_at_once_without_dependencies_each_round_after_the_last(tmp_path, monkeypatch):
    lock = tmp_path / "lock.txt"
    lock.write_text("nosuch-a==1.0  # dev 9 MB\nnosuch-b==2.0  # synth 5 MB\nnosuch-c==3.0  # dev 4 MB, after nosuch-b\n")
    started = fake_pips(monkeypatch, 0)
    assert locked_install.install(lock, "dev") == 0
    pip = ["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-compile"]
    assert all(command[1:8] == pip for command, _ in started)
    listed = [text for _, text in started]
    assert sorted(listed) == ["nosuch-a==1.0\n", "nosuch-b==2.0\n", "nosuch-c==3.0\n"]
    assert listed.index("nosuch-b==2.0\n") < listed.index("nosuch-c==3.0\n")


def test_a_failed_round_stops_its_side_and_is_the_exit_status(tmp_path, monkeypatch):
    lock = tmp_path / "lock.txt"
    lock.write_text("nosuch-b==2.0  # synth 5 MB\nnosuch-c==3.0  # dev 4 MB, after nosuch-b\n")
    started = fake_pips(monkeypatch, 1)
    assert locked_install.install(lock, "dev") == 1
    assert [text for _, text in started] == ["nosuch-b==2.0\n"]


def test_the_makefile_installs_each_set_from_the_lock_before_pip_reads_the_requirement_files():
    makefile = (ROOT / "Makefile").read_text()
    for stamp, wanted, requirements in ((".synth-deps", "synth", "requirements.txt"),
                                        (".dev-deps", "dev", "requirements-dev.txt")):
        recipe = makefile.split(f"$(VENV)/{stamp}:", 1)[1].split("\n\n", 1)[0]
        assert f"$(LOCKED_INSTALL) {wanted} ||" in recipe
        assert recipe.index("$(LOCKED_INSTALL)") < recipe.index(f"-r {requirements}")
    assert "LOCKED_INSTALL = $(PY) -m tools.locked_install install requirements-lock.txt" in makefile


def test_what_make_runs_compiles_and_keeps_bytecode_even_where_the_caller_turns_it_off():
    """The installs skip pip's byte-compiling (--no-compile): each module is compiled when first imported, and kept
    only if PYTHONDONTWRITEBYTECODE is not set in the recipes' environment (this machine sets it). Asked through
    make itself: a probe target read after the Makefile prints what its recipe sees."""
    probe = "probe:\n\t@echo \"[$${PYTHONDONTWRITEBYTECODE-unset}]\"\n"
    done = subprocess.run(["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-", "probe"], cwd=ROOT,
                          input=probe, capture_output=True, text=True, timeout=60,
                          env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[unset]"


def _make_dry_run(*targets: str) -> list[str]:
    """The commands make would run for `targets`, every prerequisite rebuilt (make -n -B): make's own expansion."""
    done = subprocess.run(["make", "--no-print-directory", "-n", "-B", *targets], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_every_pip_install_of_the_makefile_leaves_compiling_to_the_first_import():
    lines = [line for line in _make_dry_run(".venv/.dev-deps", ".venv/.train-deps", ".venv/.mutation-deps",
                                            ".venv-scan/.scan-deps") if " -m pip install " in line]
    assert len(lines) == 5  # the synth, train, dev, mutation and scan requirement files
    assert all("--no-compile" in line for line in lines), lines


def test_make_test_runs_the_suite_on_two_processes_by_the_conftest_groups():
    """tests/conftest.py schedules by GROUPS only under --dist loadgroup; under any other mode the serial group's
    timed bounds would run beside each other."""
    [pytest_line] = [line for line in _make_dry_run("test") if " -m pytest" in line]
    assert pytest_line.split(" -m pytest", 1)[1].split() == ["-q", "-n", "2", "--dist", "loadgroup"]
