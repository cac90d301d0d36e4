"""benchmarks/parity.py at its edges: the last third of longer runs, several controls, an fp8 branch without its
bf16 order, and the refusals before anything runs."""

from __future__ import annotations

import pytest

from benchmarks import parity


def run(val_loss: float, losses: list[float], order: int = 1, precision: str = "bf16") -> dict:
    return {"val_loss": val_loss, "losses": losses, "order": order, "precision": precision}


@pytest.mark.parametrize("losses,mean", [
    ([6.0, 5.0, 4.0, 3.0, 2.0, 1.0], 1.5),  # the last 2 of 6
    ([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0], 2.0),  # the last 3 of 9
    ([2.0, 1.0], 1.0),  # fewer than three: the last step
])
def test_the_tail_is_the_last_third_of_the_steps(losses, mean):
    assert parity.tail_mean(losses) == mean


BF16_ORDERS = {"bf16, order 1": run(2.00, [1.0]), "bf16, order 2": run(2.02, [1.0], 2),
               "bf16, order 3": run(1.98, [1.0], 3)}  # a 2% tolerance


def test_fp8_is_judged_only_when_every_control_passes():
    """A control in order 1 that holds (+0.5%) and one in order 2 that fails (+5%): the criterion is not met."""
    runs = BF16_ORDERS | {"bf16, order 2, repeated (control)": run(2.121, [1.0], 2),
                          "bf16, order 1, repeated (control)": run(2.01, [1.0]), "fp8, order 1": run(2.0, [1.0], 1, "fp8")}
    lines = parity.verdict_lines(runs)
    assert lines[1].endswith("parity fails (tolerance 2.000%)") and lines[2].endswith("parity holds (tolerance 2.000%)")
    assert lines[3] == "fp8, order 1: not judged: the control fails the criterion"


def test_a_control_is_judged_against_bf16_of_its_own_order():
    """The control in order 3 repeats 1.98: +0.000% against order 3, -1.0% against order 1."""
    runs = BF16_ORDERS | {"bf16, order 3, repeated (control)": run(1.98, [1.0], 3)}
    assert parity.verdict_lines(runs)[1].startswith(
        "control: bf16, order 3, repeated (control): validation loss 1.9800 vs 1.9800 (+0.000%)")


def test_an_fp8_branch_without_bf16_in_its_order_is_not_judged():
    runs = BF16_ORDERS | {parity.CONTROL: run(2.00, [1.0]), "fp8, order 4": run(2.0, [1.0], 4, "fp8")}
    assert parity.verdict_lines(runs)[-1] == "fp8, order 4: not judged: no bf16 branch in order 4"


def test_order_0_is_no_branch():
    """Data order 0 is the held-out batches' order (held_out_batches): branches are orders 1 to 9."""
    with pytest.raises(ValueError, match=r"^--branches: 'bf16, order 0' is no branch"):
        parity.branches("bf16, order 0")


@pytest.mark.parametrize("argv", [
    ["--eval-batches", "0"],
    ["--steps", "0"],
    ["--branches", "bf16, order 1|bf16, order 2|fp8, order 3"],  # fp8's order sets no tolerance
], ids=["no eval batch", "no step", "two bf16 orders and fp8 in a third"])
def test_a_run_that_could_not_be_judged_is_refused_before_anything_runs(argv, tmp_path, capsys, monkeypatch):
    # Accepted, the branches would train (a test process grew to 22.5 GB so): fail at once instead.
    monkeypatch.setattr(parity, "run", lambda args, earlier=None: pytest.fail("the branches ran"))
    assert parity.main(["--out", str(tmp_path / "out"), "--cpu", *argv]) == 2
    assert not (tmp_path / "out").exists()
    assert capsys.readouterr().err.startswith("error: --")
