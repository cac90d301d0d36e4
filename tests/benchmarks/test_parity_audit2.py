"""benchmarks/parity.py's data and branch rules on literal worked examples: blocks of seq_len + 1 bytes, each
rank's share of a micro-step (training.data's rule), the held-out split, and the branch names refused."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from benchmarks import parity


def test_blocks_are_seq_len_plus_one_bytes_and_labels_are_inputs_shifted_by_one():
    stream = torch.arange(17, dtype=torch.uint8)  # 17 bytes: four blocks of 4 (seq_len 3), the last byte left over
    batches = [b for b in itertools.islice(parity.order_batches(stream, 3, 2, 0, 0, 1), 2)]
    assert sorted(row for b in batches for row in b["input_ids"].tolist()) == [[0, 1, 2], [4, 5, 6], [8, 9, 10],
                                                                              [12, 13, 14]]
    assert sorted(row for b in batches for row in b["labels"].tolist()) == [[1, 2, 3], [5, 6, 7], [9, 10, 11],
                                                                           [13, 14, 15]]


def test_a_micro_step_gives_each_rank_its_own_consecutive_blocks_of_the_permutation():
    # Micro-step m of rank r holds permutation entries m*W*B + r*B ... + B-1: with W=2, B=2 and 8 blocks, rank 0
    # holds entries 0,1 then 4,5; rank 1 entries 2,3 then 6,7: together every block once per epoch.
    stream = torch.arange(16, dtype=torch.uint8)  # 8 blocks of 2 bytes (seq_len 1): block k starts at 2k
    seen = {rank: [row for b in itertools.islice(parity.order_batches(stream, 1, 2, 5, rank, 2), 2)
                   for row in b["input_ids"][:, 0].tolist()] for rank in (0, 1)}
    permutation = torch.randperm(8, generator=torch.Generator().manual_seed(5)).tolist()
    assert seen[0] == [2 * k for k in permutation[0:2] + permutation[4:6]]
    assert seen[1] == [2 * k for k in permutation[2:4] + permutation[6:8]]


def test_the_last_whole_micro_batch_of_an_epoch_is_used_before_the_next_permutation():
    # 4 blocks, micro-batch 2, one rank: two micro-batches per epoch, the second ends exactly at the last block.
    stream = torch.arange(8, dtype=torch.uint8)
    first_epoch = [sorted(b["input_ids"][:, 0].tolist()) for b in itertools.islice(parity.order_batches(stream, 1, 2, 3, 0, 1), 2)]
    assert sorted(first_epoch[0] + first_epoch[1]) == [0, 2, 4, 6]


def test_each_epoch_draws_the_next_permutation_of_the_same_seeded_generator():
    # 8 blocks, micro-batch 2, one rank: four micro-batches an epoch. The second epoch is the generator's second
    # draw, not its first again: repeating an epoch's order would train the same sequence twice and narrow the
    # range the bf16 orders set as the tolerance.
    stream = torch.arange(16, dtype=torch.uint8)  # 8 blocks of 2 bytes (seq_len 1): block k starts at 2k
    seen = [row for b in itertools.islice(parity.order_batches(stream, 1, 2, 5, 0, 1), 8)
            for row in b["input_ids"][:, 0].tolist()]
    generator = torch.Generator().manual_seed(5)
    first, second = (torch.randperm(8, generator=generator).tolist() for _ in range(2))
    assert first != second
    assert seen == [2 * k for k in first + second]


@pytest.mark.parametrize("relative, held", [
    # One file in ten is held out: the first byte of the SHA-256 of its relative path is 0 mod 10.
    # sha256(b"y.py")[0] = 70 (held); sha256(b"abc.py")[0] = 196, its last byte 0 mod 10 (not held);
    # sha256(b"zz.py")[0] = 155, 0 mod 5 but not mod 10 (not held); sha256(b"os.py")[0] = 217 (not held).
    ("y.py", True), ("abc.py", False), ("zz.py", False), ("os.py", False),
])
def test_one_file_in_ten_is_held_out_by_its_paths_hash(relative, held):
    assert parity.held_out(relative) is held


def test_installed_packages_are_left_out_of_the_corpus(tmp_path):
    for path in ("os.py", "json/decoder.py", "site-packages/pkg/x.py", "dist-packages/pkg/y.py", "notes.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x = 1\n")
    assert [p.relative_to(tmp_path).as_posix() for p in parity.source_files(tmp_path)] == ["json/decoder.py", "os.py"]


@pytest.mark.parametrize("names, error", [
    ("fp8, order 1, repeated (control)", "is no branch"),  # a control repeats bf16 only
    ("bf16, order 2, repeated (control)", "needs 'bf16, order 2' in the same run"),
    ("bf16, order 1|bf16, order 2, repeated (control)", "needs 'bf16, order 2' in the same run"),
])
def test_branch_names_a_run_cannot_judge_are_refused(names, error):
    with pytest.raises(ValueError, match=f"--branches: .*{error}"):
        parity.branches(names)


def test_a_control_in_another_order_is_accepted_with_its_order():
    assert parity.branches("bf16, order 2|bf16, order 2, repeated (control)") == [
        ("bf16, order 2", "bf16", 2), ("bf16, order 2, repeated (control)", "bf16", 2)]


@pytest.mark.parametrize("val_loss, tail_loss, holds", [
    # reference: validation loss 2.0, training losses 3,3,3 (tail mean 3.0); tolerance 5%
    (2.0, 3.0, True),
    (2.1, 3.0, True), (1.9, 3.0, True),  # exactly 5% either way: within (<=)
    (2.2, 3.0, False), (1.8, 3.0, False),  # 10% above or below: the gap is judged in absolute value
    (2.0, 3.3, False), (2.0, 2.7, False),  # the last third's training loss 10% off fails alone
])
def test_a_branch_holds_parity_only_with_both_gaps_within_the_tolerance(val_loss, tail_loss, holds):
    reference = {"val_loss": 2.0, "losses": [3.0, 3.0, 3.0]}
    branch = {"val_loss": val_loss, "losses": [3.0, 3.0, tail_loss]}
    assert parity.judge("fp8, order 1", branch, reference, 0.05 + 1e-12)[0] is holds


def test_an_earlier_runs_tolerance_is_its_bf16_orders_relative_range(tmp_path):
    # val losses 1.9, 2.0, 2.1: range 0.2 over mean 2.0 = 10%; the control and fp8 branches do not count.
    runs = {"bf16, order 1": {"val_loss": 1.9}, "bf16, order 2": {"val_loss": 2.0}, "bf16, order 3": {"val_loss": 2.1},
            "bf16, order 1, repeated (control)": {"val_loss": 5.0}, "fp8, order 1": {"val_loss": 9.0}}
    (tmp_path / "parity.json").write_text(json.dumps({"runs": runs, "device": "NVIDIA H100", "tolerance": 0.5}))
    earlier = parity.earlier_tolerance(str(tmp_path / "parity.json"))
    assert earlier == {"tolerance": pytest.approx(0.1), "file": "parity.json", "device": "NVIDIA H100"}


def test_fp8_is_not_judged_in_a_run_without_a_control():
    runs = {"bf16, order 1": {"val_loss": 2.0, "losses": [3.0], "order": 1},
            "fp8, order 1": {"val_loss": 2.0, "losses": [3.0], "order": 1}}
    lines = parity.verdict_lines(runs, {"tolerance": 0.05, "file": "parity.json", "device": "NVIDIA H100"})
    assert lines[-1] == "fp8, order 1: not judged: no control ran"
