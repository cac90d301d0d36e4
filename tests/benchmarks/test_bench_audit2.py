"""benchmarks/bench.py's defaults and what a group's run shows, without launching anything."""

from __future__ import annotations

import argparse
import io
import os

import pytest

from benchmarks import bench
from benchmarks.suites import BENCH_MODEL, Case, Group


def test_the_defaults_are_the_documented_make_bench_run(monkeypatch, tmp_path):
    # docs/benchmarks.md: "python -m benchmarks.bench --suite full --warmup 3 --steps 10  # = make bench".
    given = []
    monkeypatch.setattr(bench, "worker", lambda *a: given.append(a))
    assert bench.main(["--worker", "spec.json", "--out", str(tmp_path)]) == 0
    assert given == [("spec.json", str(tmp_path), BENCH_MODEL, 3, 10)]


def test_a_groups_result_rows_and_errors_are_shown_and_every_line_is_logged(monkeypatch, tmp_path, capsys):
    output = '{"case": "a", "step_time_s": 1.0}\nnoise from NCCL\nRuntimeError: boom\nerror: lost\n'

    class Proc:
        def __init__(self, command, env, **kwargs):
            self.stdout = io.StringIO(output)

        def wait(self):
            return 0

    monkeypatch.setattr(bench.subprocess, "Popen", Proc)
    group = Group("g", 1, [Case("a")], env={}, measure_matmul=False, measure_links=False, gpus_per_node=1)
    args = argparse.Namespace(gpus=1, model="tiny", warmup=1, steps=1, site=None)
    assert bench.run_group(group, tmp_path, args) == 0
    shown = capsys.readouterr().out.splitlines()[1:]  # after the group's header line
    assert shown == ['{"case": "a", "step_time_s": 1.0}', "RuntimeError: boom", "error: lost"]
    assert (tmp_path / "group-g.log").read_text() == output


def _main(monkeypatch, tmp_path, *options) -> tuple[int, dict[str, list[str]]]:
    """bench.main on CPU with the groups' runs recorded instead of launched: (exit status, {group: its cases})."""
    ran = {}
    monkeypatch.setattr(bench, "run_group", lambda group, out, args: ran.update({group.name: [c.name for c in group.cases]}) or 0)
    monkeypatch.setattr(bench, "report", lambda out, groups, gpus: "")
    return bench.main(["--cpu", "--out", str(tmp_path), *options]), ran


def test_each_case_runs_once_unless_rounds_are_asked_for(monkeypatch, tmp_path):
    _, once = _main(monkeypatch, tmp_path, "--suite", "smoke")
    assert once == {"main": ["trainer, h200 profile (default)", "example recipe at its shape"]}
    # --rounds 2: every case twice, in turn (a, b, a, b), each run named by its round
    _, twice = _main(monkeypatch, tmp_path, "--suite", "smoke", "--rounds", "2")
    assert [name.split(",")[0] for name in twice["main"]] == ["trainer", "example recipe at its shape"] * 2


def test_groups_picks_only_the_named_groups(monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "wheel_site", lambda out, package: None)
    status, ran = _main(monkeypatch, tmp_path, "--suite", "full", "--groups", "main,sockets")
    assert status == 0 and sorted(ran) == ["main", "sockets"]


def test_an_unknown_group_is_refused_naming_it_and_the_suites_groups(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "wheel_site", lambda out, package: None)
    status, ran = _main(monkeypatch, tmp_path, "--suite", "full", "--groups", "main,nope")
    assert (status, ran) == (2, {})
    assert "error: --groups: nope not in suite full" in capsys.readouterr().err


def test_cases_keeps_only_the_named_cases_and_drops_groups_left_empty(monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "wheel_site", lambda out, package: None)
    status, ran = _main(monkeypatch, tmp_path, "--suite", "full", "--groups", "main,peer",
                        "--cases", "example recipe at its shape")
    assert status == 0 and ran == {"main": ["example recipe at its shape"]}


def _missing(out, package):
    raise RuntimeError(f"{package} is not installed")


def test_the_full_suite_runs_without_its_peer_package_but_mfu_is_refused(monkeypatch, tmp_path, capsys):
    # SUITE_PACKAGES: the full suite's peer case says it is missing; mfu measures against the peer and needs it.
    monkeypatch.setattr(bench, "wheel_site", _missing)
    status, ran = _main(monkeypatch, tmp_path, "--suite", "full", "--groups", "main")
    assert status == 0 and list(ran) == ["main"]
    assert "note: liger_kernel is not installed" in capsys.readouterr().err
    status, ran = _main(monkeypatch, tmp_path, "--suite", "mfu")
    assert (status, ran) == (2, {})
    assert "error: --suite mfu: liger_kernel is not installed" in capsys.readouterr().err


def test_a_bad_option_exits_2_naming_it_before_anything_runs(monkeypatch, tmp_path, capsys):
    # Exit status 2 is a usage error (as argparse's own), 1 a group that failed.
    status, ran = _main(monkeypatch, tmp_path, "--model", "no-such-model")
    assert (status, ran) == (2, {})
    assert capsys.readouterr().err.startswith("error: --model: 'no-such-model' is not a built-in config")


@pytest.mark.parametrize("suite, package", [
    # --suite's help: lora needs peft, mfu liger-kernel, fp8 and fp8-80gb torchao (installed, or wheels in .whl/)
    ("lora", "peft"), ("mfu", "liger_kernel"), ("fp8", "torchao"), ("fp8-80gb", "torchao"),
])
def test_a_suite_without_the_package_it_needs_is_refused_before_anything_runs(monkeypatch, tmp_path, capsys, suite, package):
    monkeypatch.setattr(bench, "wheel_site", _missing)
    assert _main(monkeypatch, tmp_path, "--suite", suite) == (2, {})
    assert f"error: --suite {suite}: {package} is not installed" in capsys.readouterr().err


def test_an_installed_package_is_used_as_it_is_and_a_missing_one_without_wheels_is_named(monkeypatch, tmp_path):
    assert bench.wheel_site(tmp_path, "json") is None  # installed: nothing to put on the workers' path
    monkeypatch.setattr(bench, "WHEELS", tmp_path / "no-wheels")
    with pytest.raises(RuntimeError, match="not_a_package_here is not installed and .* holds no wheels"):
        bench.wheel_site(tmp_path, "not_a_package_here")
    assert not (tmp_path / "site-packages").exists()


def test_wheels_are_installed_offline_without_dependencies_into_the_outputs_site(monkeypatch, tmp_path):
    # A GPU machine may have no registry: pip must not reach one (--no-index) nor pull torch again (--no-deps).
    wheels = tmp_path / "whl"
    wheels.mkdir()
    (wheels / "peft-0.1-py3-none-any.whl").write_text("")
    commands = []
    monkeypatch.setattr(bench, "WHEELS", wheels)
    monkeypatch.setattr(bench.subprocess, "run", lambda command, check: commands.append(command))
    assert bench.wheel_site(tmp_path, "not_a_package_here") == str(tmp_path / "site-packages")
    [command] = commands
    assert command[1:4] == ["-m", "pip", "install"] and {"--no-index", "--no-deps"} <= set(command)
    assert command[command.index("--target") + 1] == str(tmp_path / "site-packages")
    assert command[-1] == str(wheels / "peft-0.1-py3-none-any.whl")


@pytest.mark.parametrize("warmup, steps, rounds, gpus, error", [
    (1, 1, 1, None, None), (1, 1, 1, 1, None), (1, 1, 1, 2, None),
    (0, 1, 1, None, "--warmup/--steps: 0/1 must both be at least 1"),
    (1, 0, 1, None, "--warmup/--steps: 1/0 must both be at least 1"),
    (1, 1, 0, None, "--rounds: 0 must be at least 1"),
    (1, 1, 1, 0, "--gpus: 0 must be at least 1"),
])
def test_each_count_must_be_at_least_one(monkeypatch, tmp_path, warmup, steps, rounds, gpus, error):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    args = argparse.Namespace(model="tiny", warmup=warmup, steps=steps, rounds=rounds, gpus=gpus, out=str(tmp_path),
                              cpu=True)
    assert bench.check_args(args) == error
    if error is None:
        assert args.gpus == (gpus or 1)  # --cpu: one process unless told
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ""  # --cpu: the workers see no GPU
