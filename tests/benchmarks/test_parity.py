"""benchmarks.parity without a GPU: the corpus it makes, the data orders, and the criterion, with figures worked by hand."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import torch

from benchmarks import parity


def corpus_folder(tmp_path):
    """Twenty small source files, and an installed package that is not the standard library's."""
    for i in range(20):
        (tmp_path / "pkg" / f"m{i}.py").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n" * 40)
    (tmp_path / "site-packages" / "other").mkdir(parents=True)
    (tmp_path / "site-packages" / "other" / "x.py").write_text("installed = True\n")
    return tmp_path


def test_the_corpus_holds_every_standard_library_file_once_training_or_held_out(tmp_path):
    root = corpus_folder(tmp_path)
    files = parity.source_files(root)
    assert len(files) == 20  # site-packages left out
    held = [f for f in files if parity.held_out(f.relative_to(root).as_posix())]
    assert 0 < len(held) < 20
    train, validation = parity.corpus(root, False), parity.corpus(root, True)
    assert len(train) + len(validation) == sum(f.stat().st_size for f in files)
    assert bytes(validation.numpy()) == b"".join(f.read_bytes() for f in held)


def test_every_branch_is_judged_on_blocks_of_the_held_out_files_only(tmp_path):
    root = corpus_folder(tmp_path)
    files = parity.source_files(root)
    held = b"".join(f.read_bytes() for f in files if parity.held_out(f.relative_to(root).as_posix()))
    batches = parity.held_out_batches(root, 16, 2, 3, 0, 1)
    rows = [bytes(row.tolist()) for batch in batches for row in torch.cat([batch["input_ids"], batch["labels"][:, -1:]], 1)]
    assert len(rows) == 6 and all(row in held for row in rows)


def test_held_out_is_a_tenth_of_paths_by_their_hash():
    # sha256("a.py") begins with byte 0xf0 = 240 (240 % 10 = 0: held out); "b.py" with 0x4a = 74 (4).
    assert parity.held_out("a.py") and not parity.held_out("b.py")


def test_a_data_order_repeats_exactly_and_another_order_differs(tmp_path):
    stream = parity.corpus(corpus_folder(tmp_path), False)
    first = [b["input_ids"] for b in itertools.islice(parity.order_batches(stream, 16, 2, 1, 0, 1), 3)]
    again = [b["input_ids"] for b in itertools.islice(parity.order_batches(stream, 16, 2, 1, 0, 1), 3)]
    other = [b["input_ids"] for b in itertools.islice(parity.order_batches(stream, 16, 2, 2, 0, 1), 3)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_labels_are_the_next_byte_and_two_ranks_split_one_ranks_rows(tmp_path):
    stream = parity.corpus(corpus_folder(tmp_path), False)
    one = next(parity.order_batches(stream, 16, 4, 3, 0, 1))
    ranks = [next(parity.order_batches(stream, 16, 2, 3, r, 2)) for r in (0, 1)]
    assert torch.equal(one["input_ids"][:, 1:], one["labels"][:, :-1]) and one["input_ids"].max() < 256
    assert torch.equal(torch.cat([r["input_ids"] for r in ranks]), one["input_ids"])


def test_two_ranks_read_each_block_once_per_epoch_as_one_rank_of_their_global_batch_does():
    """Eight blocks of 5 bytes, block k all byte k (seq_len 4), one block a micro-batch per rank: over 4 steps the two
    ranks read the 8 blocks once each (an epoch), and at each step the pair holds what one rank of micro-batch 2
    (the same global batch) holds, rank 0 first (training.data's rule)."""
    stream = torch.tensor([k for k in range(8) for _ in range(5)], dtype=torch.uint8)

    def blocks(micro_batch: int, rank: int, world: int) -> list[list[int]]:
        batches = itertools.islice(parity.order_batches(stream, 4, micro_batch, 3, rank, world), 4)
        return [b["input_ids"][:, 0].tolist() for b in batches]

    ranks, one = [blocks(1, r, 2) for r in (0, 1)], blocks(2, 0, 1)
    assert sorted(k for rank in ranks for step in rank for k in step) == list(range(8))
    assert [r0 + r1 for r0, r1 in zip(*ranks)] == one


def run(val_loss: float, losses: list[float], order: int = 1, precision: str = "bf16") -> dict:
    return {"val_loss": val_loss, "losses": losses, "order": order, "precision": precision}


def test_the_tolerance_is_the_relative_range_of_bf16_over_data_orders_without_the_control():
    runs = {"bf16, order 1": run(2.00, [1.0]), "bf16, order 2": run(2.02, [1.0], 2), "bf16, order 3": run(1.98, [1.0], 3),
            parity.CONTROL: run(2.50, [1.0]), "fp8, order 1": run(3.0, [1.0], 1, "fp8")}
    # (2.02 - 1.98) / mean(2.00, 2.02, 1.98) = 0.04 / 2.0 = 2%; the control and fp8 take no part.
    assert parity.criterion(runs) == pytest.approx(0.02)


def test_a_branch_within_the_tolerance_on_validation_and_the_last_third_holds():
    reference = run(2.0, [3.0, 2.0, 1.0])
    # Validation 2.01 / 2.0 - 1 = +0.50%; last third (the last step) 1.004 / 1.0 - 1 = +0.40%; the first step 3.03
    # (1.00% off, the largest) is reported but not judged.
    holds, line = parity.judge("fp8, order 1", run(2.01, [3.03, 2.0, 1.004]), reference, 0.006)
    assert holds
    assert line == ("fp8, order 1: validation loss 2.0100 vs 2.0000 (+0.500%), last-third training loss +0.400% "
                    "(largest single step 1.00% at step 1): parity holds (tolerance 0.600%)")


def test_a_lower_validation_loss_beyond_the_tolerance_fails():
    # The tolerance applies either side: 1.98 / 2.0 - 1 = -1.00% is no parity, though it looks better.
    holds, line = parity.judge("fp8, order 1", run(1.98, [1.0]), run(2.0, [1.0]), 0.006)
    assert not holds and line.endswith("parity fails (tolerance 0.600%)")


def test_a_last_third_off_by_more_than_the_tolerance_fails_with_the_same_validation_loss():
    holds, _ = parity.judge("fp8, order 1", run(2.0, [3.0, 2.0, 1.01]), run(2.0, [3.0, 2.0, 1.0]), 0.006)
    assert not holds


def test_fp8_is_not_judged_when_the_control_fails():
    runs = {"bf16, order 1": run(2.00, [1.0]), "bf16, order 2": run(2.01, [1.0], 2), "bf16, order 3": run(2.00, [1.0], 3),
            parity.CONTROL: run(2.10, [1.0]), "fp8, order 1": run(2.0, [1.0], 1, "fp8")}
    lines = parity.verdict_lines(runs)
    assert lines[0].startswith("tolerance: 0.499%")  # 0.01 / 2.00333
    assert lines[1].startswith("control: ") and lines[1].endswith("parity fails (tolerance 0.499%)")
    assert lines[2] == "fp8, order 1: not judged: the control fails the criterion"


def test_fp8_is_judged_against_bf16_of_its_own_data_order_once_the_control_passes():
    runs = {"bf16, order 1": run(2.00, [1.0]), "bf16, order 2": run(2.04, [1.0], 2), "bf16, order 3": run(2.02, [1.0], 3),
            parity.CONTROL: run(2.00, [1.0]), "fp8, order 2": run(2.04, [1.0], 2, "fp8")}
    # Against order 2's 2.04: +0.000%; against order 1's 2.00 it would be +2.0%, beyond the 1.98% tolerance.
    assert parity.verdict_lines(runs)[2].startswith("fp8, order 2: validation loss 2.0400 vs 2.0400 (+0.000%)")
    assert parity.verdict_lines(runs)[2].endswith("parity holds (tolerance 1.980%)")


def test_branches_default_to_every_branch_and_name_a_control_in_any_order():
    assert parity.branches(None) == list(parity.BRANCHES)
    assert parity.branches("bf16, order 2|fp8, order 2|bf16, order 2, repeated (control)") == [
        ("bf16, order 2", "bf16", 2), ("fp8, order 2", "fp8", 2), ("bf16, order 2, repeated (control)", "bf16", 2)]


@pytest.mark.parametrize("names, message", [
    ("bf16, order 2|fp8 order 2", "'fp8 order 2' is no branch"),
    ("fp8, order 2, repeated (control)", "'fp8, order 2, repeated (control)' is no branch"),
    ("fp8, order 2|bf16, order 2, repeated (control)", "the control 'bf16, order 2, repeated (control)' needs 'bf16, order 2'"),
])
def test_a_branch_that_cannot_be_run_or_judged_is_refused_naming_branches(names, message):
    with pytest.raises(ValueError, match="^" + re.escape(f"--branches: {message}")):
        parity.branches(names)


def earlier_run(tmp_path) -> str:
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "runs": {
        "bf16, order 1": run(2.00, [1.0]), "bf16, order 2": run(2.02, [1.0], 2), "bf16, order 3": run(1.98, [1.0], 3),
        parity.CONTROL: run(2.00, [1.0]), "fp8, order 1": run(2.0, [1.0], 1, "fp8")}}))
    return str(path)


def test_a_subset_takes_its_tolerance_from_an_earlier_run_and_judges_fp8_once_its_own_control_passes(tmp_path):
    earlier = parity.earlier_tolerance(earlier_run(tmp_path))
    runs = {"bf16, order 2": run(2.00, [1.0], 2), "fp8, order 2": run(2.03, [1.0], 2, "fp8"),
            "bf16, order 2, repeated (control)": run(2.01, [1.0], 2)}
    lines = parity.verdict_lines(runs, earlier)
    # The earlier run's orders: (2.02 - 1.98) / 2.00 = 2.000%; the control 2.01 / 2.00 - 1 = +0.5% holds, fp8 +1.5%.
    assert lines[0] == "tolerance: 2.000%, from earlier.json (NVIDIA H100 80GB HBM3): its bf16 data orders' range"
    assert lines[1].startswith("control: bf16, order 2, repeated (control): validation loss 2.0100 vs 2.0000 (+0.500%)")
    assert lines[2].startswith("fp8, order 2: validation loss 2.0300 vs 2.0000 (+1.500%)")
    assert lines[2].endswith("parity holds (tolerance 2.000%)")


def test_fp8_is_not_judged_where_no_control_ran(tmp_path):
    runs = {"bf16, order 2": run(2.00, [1.0], 2), "fp8, order 2": run(2.00, [1.0], 2, "fp8")}
    assert parity.verdict_lines(runs, parity.earlier_tolerance(earlier_run(tmp_path)))[1:] == [
        "fp8, order 2: not judged: no control ran"]


def test_a_subset_without_three_bf16_orders_and_no_earlier_tolerance_is_one_line_before_anything_runs(tmp_path, capsys):
    code = parity.main(["--out", str(tmp_path / "out"), "--cpu", "--branches", "bf16, order 2|fp8, order 2"])
    assert code == 2 and not (tmp_path / "out").exists()
    assert capsys.readouterr().err == ("error: --branches: fewer than three bf16 data orders set no tolerance; add "
                                       "--tolerance-from an earlier run's parity.json\n")


class BranchesRan(Exception):
    """parity.run reached: the branches would now be trained (minutes, and gigabytes on a laptop)."""


@pytest.fixture
def branches_not_run(monkeypatch):
    def reached(args, earlier=None):
        raise BranchesRan(" | ".join(name for name, _, _ in args.branches))

    monkeypatch.setattr(parity, "run", reached)


@pytest.mark.parametrize("names", ["bf16, order 1|bf16, order 2",
                                   "bf16, order 1|bf16, order 2|bf16, order 1, repeated (control)"],
                         ids=["two orders", "two orders and a control"])
def test_two_bf16_orders_without_an_earlier_tolerance_are_refused_before_any_branch_runs(names, tmp_path, capsys,
                                                                                         branches_not_run):
    # A range over two values is no spread to judge by; the refusal is one line, and no branch trains.
    assert parity.main(["--out", str(tmp_path / "out"), "--cpu", "--branches", names]) == 2
    assert capsys.readouterr().err == ("error: --branches: fewer than three bf16 data orders set no tolerance; add "
                                       "--tolerance-from an earlier run's parity.json\n")


def test_three_bf16_orders_set_their_own_tolerance_and_their_branches_run(tmp_path, branches_not_run):
    names = "bf16, order 1|bf16, order 2|bf16, order 3"
    with pytest.raises(BranchesRan, match="^" + re.escape(names.replace("|", " | ")) + "$"):
        parity.main(["--out", str(tmp_path / "out"), "--cpu", "--branches", names])


def test_a_cpu_run_writes_each_branch_and_its_control_matches_its_bf16_branch_exactly(tmp_path):
    """The whole `python -m benchmarks.parity` on the CPU, one step of two branches: what the GPU run would do, in
    seconds. On the CPU a repeated branch is bit-identical (same warm checkpoint, same batches)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.parity", "--cpu", "--model", "tiny", "--warm-steps", "1", "--steps", "1",
         "--seq-len", "32", "--micro-batch", "2", "--eval-batches", "1", "--out", str(out),
         "--branches", "bf16, order 2|bf16, order 2, repeated (control)", "--tolerance-from", earlier_run(tmp_path)],
        capture_output=True, text=True, timeout=300, env=os.environ | {"MASTER_PORT": str(port)})
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "parity.json").read_text())
    root = Path(os.__file__).parent
    held_bytes = sum(f.stat().st_size for f in parity.source_files(root) if parity.held_out(f.relative_to(root).as_posix()))
    assert results["corpus"]["validation_bytes"] == held_bytes
    runs = results["runs"]
    assert list(runs) == ["bf16, order 2", "bf16, order 2, repeated (control)"]
    assert runs["bf16, order 2, repeated (control)"]["val_loss"] == runs["bf16, order 2"]["val_loss"]
    assert "control: bf16, order 2, repeated (control): validation loss" in done.stdout
