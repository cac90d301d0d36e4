"""benchmarks.parity's command line past the branch check: a name that is no branch, an unreadable or incomplete
--tolerance-from, what reaches parity.run, who prints the verdict, and --plot of an earlier run's file."""

from __future__ import annotations

import json

import pytest

from benchmarks import parity


def run(val_loss, losses, order=1, precision="bf16"):
    return {"precision": precision, "order": order, "losses": losses, "val_loss": val_loss}


def earlier_file(tmp_path, **drop):
    # bf16 orders at 2.02, 1.98, 2.00: a range of 0.04 over a mean of 2.00, a tolerance of 2.000%.
    results = {"device": "NVIDIA L4", "runs": {
        "bf16, order 1": run(2.00, [1.0, 1.0]), "bf16, order 2": run(2.02, [1.0, 1.0], 2),
        "bf16, order 3": run(1.98, [1.0, 1.0], 3), parity.CONTROL: run(2.01, [1.0, 1.0]),
        "fp8, order 1": run(2.03, [1.0, 1.0], 1, "fp8")}}
    for key in drop:
        del results[key]
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(results))
    return path


@pytest.fixture
def reached(monkeypatch):
    """parity.run replaced: what main hands it, and a result with no training."""
    seen = {}

    def fake_run(args, earlier=None):
        seen.update(args=args, earlier=earlier)
        return {"runs": {"bf16, order 2": run(2.00, [1.0], 2), "bf16, order 2, repeated (control)": run(2.01, [1.0], 2)}}

    monkeypatch.setattr(parity, "run", fake_run)
    return seen


def test_a_name_that_is_no_branch_is_one_line_naming_branches_and_nothing_runs(tmp_path, capsys, reached):
    assert parity.main(["--out", str(tmp_path / "out"), "--cpu", "--branches", "fp16, order 1"]) == 2
    assert capsys.readouterr().err.startswith("error: --branches: 'fp16, order 1' is no branch;")
    assert not reached and not (tmp_path / "out").exists()


def test_a_missing_tolerance_file_is_one_line_naming_tolerance_from_and_nothing_runs(tmp_path, capsys, reached):
    missing = str(tmp_path / "gone.json")
    assert parity.main(["--out", str(tmp_path / "out"), "--branches", "bf16, order 2", "--tolerance-from", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --tolerance-from: {missing}: ") and "No such file" in err and err.count("\n") == 1
    assert not reached and not (tmp_path / "out").exists()


def test_a_tolerance_file_without_its_device_is_one_line_naming_the_missing_key(tmp_path, capsys, reached):
    path = earlier_file(tmp_path, device=True)
    assert parity.main(["--out", str(tmp_path / "out"), "--branches", "bf16, order 2", "--tolerance-from", str(path)]) == 2
    assert capsys.readouterr().err == f"error: --tolerance-from: {path}: 'device'\n"
    assert not reached


def test_the_earlier_tolerance_and_the_chosen_branches_reach_the_run(tmp_path, reached):
    path = earlier_file(tmp_path)
    names = "bf16, order 2|bf16, order 2, repeated (control)"
    assert parity.main(["--out", str(tmp_path / "out"), "--branches", names, "--tolerance-from", str(path),
                        "--steps", "7", "--warm-steps", "3", "--seq-len", "16", "--micro-batch", "2"]) == 0
    assert reached["earlier"] == {"tolerance": pytest.approx(0.02), "file": "earlier.json", "device": "NVIDIA L4"}
    args = reached["args"]
    assert args.branches == [("bf16, order 2", "bf16", 2), ("bf16, order 2, repeated (control)", "bf16", 2)]
    assert (args.steps, args.warm_steps, args.seq_len, args.micro_batch, args.eval_batches) == (7, 3, 16, 2, 16)
    assert (tmp_path / "out").is_dir()


@pytest.mark.parametrize("rank, printed", [("0", True), ("1", False)])
def test_only_rank_0_prints_the_verdict_judged_on_the_earlier_tolerance(rank, printed, tmp_path, capsys, monkeypatch,
                                                                         reached):
    monkeypatch.setenv("RANK", rank)
    names = "bf16, order 2|bf16, order 2, repeated (control)"
    assert parity.main(["--out", str(tmp_path / "out"), "--branches", names,
                        "--tolerance-from", str(earlier_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    # 2.01 / 2.00 - 1 = +0.5%, within the earlier file's 2.000%.
    expected = ["tolerance: 2.000%, from earlier.json (NVIDIA L4): its bf16 data orders' range",
                "control: bf16, order 2, repeated (control): validation loss 2.0100 vs 2.0000 (+0.500%), last-third "
                "training loss +0.000% (largest single step 0.00% at step 1): parity holds (tolerance 2.000%)"]
    assert out.splitlines() == (expected if printed else [])


def test_plot_draws_an_earlier_runs_file_and_prints_its_verdict_without_training(tmp_path, capsys, reached,
                                                                                 monkeypatch):
    # The drawing itself (matplotlib, seconds to import) is left out: what it is handed, and the verdict, are checked.
    drawn = []
    monkeypatch.setattr(parity, "plot", lambda results, png: drawn.append((sorted(results["runs"]), png)))
    png = str(tmp_path / "parity.png")
    assert parity.main(["--plot", str(earlier_file(tmp_path)), png]) == 0
    assert drawn == [(sorted(json.loads((tmp_path / "earlier.json").read_text())["runs"]), png)] and not reached
    lines = capsys.readouterr().out.splitlines()
    # Its own three orders set the tolerance; its control (+0.5%) passes, so fp8 (+1.5%) is judged.
    assert lines[0] == ("tolerance: 2.000%, the relative range of bf16's final validation loss over data orders "
                        "(2.0000, 2.0200, 1.9800)")
    assert lines[1].endswith("parity holds (tolerance 2.000%)") and lines[1].startswith("control: ")
    assert lines[2].startswith("fp8, order 1: validation loss 2.0300 vs 2.0000 (+1.500%)")


@pytest.mark.parametrize("tolerance, holds", [(0.25, True), (0.2499, False)])
def test_a_gap_exactly_at_the_tolerance_is_within_it(tolerance, holds):
    # Last-third training loss 1.25 vs 1.0: a gap of exactly +25% (binary-exact), validation equal.
    assert parity.judge("fp8, order 1", run(2.0, [1.25], 1, "fp8"), run(2.0, [1.0]), tolerance)[0] is holds


@pytest.mark.parametrize("option", ["--warm-steps", "--steps", "--seq-len", "--micro-batch", "--eval-batches"])
def test_each_size_of_zero_is_refused_in_one_line_before_anything_runs(option, tmp_path, capsys, reached):
    assert parity.main(["--out", str(tmp_path / "out"), "--cpu", option, "0"]) == 2
    assert capsys.readouterr().err == ("error: --warm-steps, --steps, --seq-len, --micro-batch and --eval-batches must "
                                       "be at least 1\n")
    assert not reached and not (tmp_path / "out").exists()
