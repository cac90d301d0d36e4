"""The test faults do what training/faults.py's docstring says, on the rank and the attempt it says: a fault that
fires on the wrong rank, on every attempt, or not at all lets a recovery test pass without the failure it claims."""

from __future__ import annotations

import json

import pytest
import torch

from training import faults
from training.command_line import parse_args
from training.faults import FAULTS_ENV, ROW_LOG_ENV, RowLog, at_step_start, before_upload, row_id


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    (tmp_path / "run").mkdir()
    return str(tmp_path / "run")


def _output_is_nan(hook, model) -> bool:
    try:
        return bool(model(torch.ones(1, 2)).isnan().all())
    finally:
        if hook is not None:
            hook.remove()


def test_a_nan_fault_makes_rank_0s_loss_nan_once_per_run(run, monkeypatch):
    """nan@2 on 2 workers: rank 0's output at step 2 is NaN (the last rank gets nothing, though the other faults
    are its), and the retry that trains step 2 again trains it cleanly."""
    monkeypatch.setenv(FAULTS_ENV, "nan@2")
    model, cfg = torch.nn.Linear(2, 2), parse_args([])
    assert at_step_start(cfg, 2, 1, 2, run, model) is None  # the last rank first: it must not use the fault up
    assert at_step_start(cfg, 1, 0, 2, run, model) is None
    assert _output_is_nan(at_step_start(cfg, 2, 0, 2, run, model), model)
    assert at_step_start(cfg, 2, 0, 2, run, model) is None  # the retry


def test_inject_nan_at_step_makes_rank_0s_loss_nan_on_every_attempt(run):
    """--inject-nan-at-step (TrainConfig: rank 0's loss NaN, on every attempt): rank 0 gets the hook each time it
    trains that step, the other rank never."""
    model, cfg = torch.nn.Linear(2, 2), parse_args(["--inject-nan-at-step", "2"])
    assert at_step_start(cfg, 2, 1, 2, run, model) is None
    for _attempt in range(2):
        assert _output_is_nan(at_step_start(cfg, 2, 0, 2, run, model), model)


def test_a_raise_fault_raises_on_the_last_rank_once_per_run(run, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "raise@3")
    cfg = parse_args([])
    at_step_start(cfg, 3, 0, 2, run, model=None)  # not rank 0's
    with pytest.raises(RuntimeError, match="^injected exception at step 3$"):
        at_step_start(cfg, 3, 1, 2, run, model=None)
    at_step_start(cfg, 3, 1, 2, run, model=None)  # the retry trains step 3 through



def test_the_same_fault_at_two_steps_fires_at_each_once(run, monkeypatch):
    """raise@3,raise@6 (a chain that fails again after its resume, as the fault matrix's do): each step's fault
    fires once per run, the second not used up by the first."""
    monkeypatch.setenv(FAULTS_ENV, "raise@3,raise@6")
    cfg = parse_args([])
    for step in (3, 6):
        with pytest.raises(RuntimeError, match=f"^injected exception at step {step}$"):
            at_step_start(cfg, step, 1, 2, run, model=None)
        at_step_start(cfg, step, 1, 2, run, model=None)  # the retry trains it through

class _Settling:
    def __init__(self, problems: list[str]) -> None:
        self.problems, self.settled = problems, 0
        self.shipments = []

    def settle(self) -> list[str]:
        self.settled += 1
        return self.problems


@pytest.mark.parametrize("problems, raised", [([], None), (["checkpoint of step 2: OSError: refused"], "refused")])
def test_a_settle_fault_waits_for_the_saves_and_raises_a_failed_one(run, monkeypatch, problems, raised):
    monkeypatch.setenv(FAULTS_ENV, "settle@3")
    checkpoints = _Settling(problems)
    if raised:
        with pytest.raises(RuntimeError, match=raised):
            at_step_start(parse_args([]), 3, 0, 2, run, model=None, checkpoints=checkpoints)
    else:
        at_step_start(parse_args([]), 3, 0, 2, run, model=None, checkpoints=checkpoints)
    assert checkpoints.settled == 1


@pytest.mark.parametrize("files, uploaded", [
    ({".metadata", "__0_0.distcp", "rng-rank0.pt"}, True),  # the last rank's (1) own files do not count
    ({"__0_0.distcp", "rng-rank0.pt"}, False),
    ({".metadata", "rng-rank0.pt"}, False),
    ({".metadata", "__0_0.distcp"}, False),
    ({".metadata", "__1_0.distcp", "rng-rank1.pt"}, False),  # only the last rank's
])
def test_a_kill_waits_for_every_other_ranks_part_of_the_save(tmp_path, files, uploaded):
    for name in files:
        (tmp_path / name).write_bytes(b"x")
    assert faults._others_uploaded(str(tmp_path), world=2) is uploaded


def test_a_storage_fault_uploads_the_last_ranks_first_file_then_refuses(run, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULTS_ENV, "storage@4")
    local = tmp_path / "local"
    local.mkdir()
    for name in ("b.distcp", "a.distcp", "c.pt"):
        (local / name).write_text(name)
    uri = f"{run}/checkpoint_4"
    before_upload(4, 0, 2, run, str(local), uri)  # rank 0's upload is left alone
    with pytest.raises(OSError, match="refused a write after a.distcp"):
        before_upload(4, 1, 2, run, str(local), uri)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoint_4").iterdir()) == ["a.distcp"]


def test_the_row_log_records_each_steps_own_rows(tmp_path, monkeypatch):
    monkeypatch.setenv(ROW_LOG_ENV, str(tmp_path))
    log = RowLog("sft", rank=1, world=2, attempt="a1")
    batches = [{"input_ids": torch.tensor([[1, 2], [3, 4]])}, {"input_ids": torch.tensor([[5, 6]])}]
    tapped = iter(log.tap(batches))
    log.started(0, ["resume: none"])
    next(tapped)
    log.step_done(1)
    next(tapped)
    log.step_done(2)
    records = [json.loads(line) for line in (tmp_path / "sft" / "rank1.jsonl").read_text().splitlines()]
    assert records == [
        {"attempt": "a1", "world": 2, "resumed_from": 0, "lines": ["resume: none"]},
        {"attempt": "a1", "world": 2, "step": 1, "rows": [row_id(torch.tensor([1, 2])), row_id(torch.tensor([3, 4]))]},
        {"attempt": "a1", "world": 2, "step": 2, "rows": [row_id(torch.tensor([5, 6]))]},
    ]


def test_a_rows_identity_is_its_token_ids_whatever_their_dtype():
    assert row_id(torch.tensor([5, 6], dtype=torch.int32)) == row_id(torch.tensor([5, 6], dtype=torch.int64))
    assert row_id(torch.tensor([5, 6])) != row_id(torch.tensor([6, 5]))


@pytest.mark.parametrize("spec, step, fires", [
    ("kill@12", 1, False),  # a step is a whole item: kill@12 is not kill@1
    ("kill@12", 12, True),
    ("kill@3,kill@12", 1, False),
    ("kill@3,kill@12", 12, True),
    ("other-run=kill@1;run=kill@12", 1, False),  # another run's fault is not this run's
    ("other-run=kill@1;run=kill@12", 12, True),
])
def test_a_fault_is_armed_only_at_a_step_its_spec_names_in_full(run, monkeypatch, spec, step, fires):
    monkeypatch.setenv(FAULTS_ENV, spec)
    assert faults.armed("kill", step, run) is fires
