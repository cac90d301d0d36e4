"""Exact resume over gloo, without Ray: the worker's own setup (worker.prepare_training: build, per-rank seeds,
restore) and data position (worker.train_batches), driven by a short copy of the training loop.

1. Random state: two identical runs with LoRA dropout are identical, and a run killed after its checkpoint
   and resumed from it matches the uninterrupted run (the dropout masks continue where they were).
2. Another world size: a run checkpointed on 2 workers resumes on 1, and one from 1 on 2 (and 4), at the same
   global batch (--batch-tokens), and ends with the uninterrupted run's losses.

Tolerance (derived, not fitted). On CPU every sum is fp32; a different world size sums the same terms in
another order (per-rank partial sums, then the reduction, against one rank's accumulation over micro-batches).
Reordering a sum of n fp32 terms changes it by at most about n * 2^-24 of its magnitude (Higham, Accuracy
and Stability of Numerical Algorithms, 2nd ed., eq. 4.4: |error| <= (n-1) u sum|x_i|, u = 2^-24). The loss
is a mean over a step's tokens, and each resumed step inherits the previous steps' weight differences, so
after k steps the relative difference stays below k x tokens-per-step x 2^-24. Here: 3 steps x 4 sequences
x 32 tokens x 2^-24 = 2.3e-5. A resume one global batch off trains other sequences and misses it by far.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

from training import checkpoint as ckpt
from training.config import TrainConfig
from training.config_rules import validate
from training.schedule import lr_at
from training.step import train_step
from training.worker import global_batch_rows, prepare_training, train_batches
from tests.process_group import leave, spawn

SEQ_LEN = 32
GLOBAL_SEQUENCES = 4
STEPS = 5
RESUMED_STEPS = 3  # steps 3, 4, 5 after a checkpoint at step 2
TOLERANCE = RESUMED_STEPS * GLOBAL_SEQUENCES * SEQ_LEN * 2.0 ** -24


def _config(world: int, micro_batch: int, **changes) -> TrainConfig:
    return validate(TrainConfig(model="tiny", seq_len=SEQ_LEN, micro_batch=micro_batch, workers=world,
                                batch_tokens=GLOBAL_SEQUENCES * SEQ_LEN, steps=STEPS + 1, lr=1e-2, warmup_steps=1,
                                seed=5, **changes))


def _worker(rank: int, world: int, port: int, cfg: TrainConfig, start: str | None, save_at: int | None,
            save_to: str | None, stop_at: int, rows_shift: int, history: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = torch.device("cpu")
    torch.rand(history)  # a worker process's generator holds whatever its history left there (a reused Ray worker)
    model, optimizer, step, rows = prepare_training(cfg, device, rank, world, checkpoint=start)
    first = step
    batches = train_batches(cfg, model.config.vocab_size, rank, world, rows + rows_shift)
    losses = []
    while step < stop_at:
        lr = lr_at(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
        losses.append(train_step(model, optimizer, batches, cfg.grad_accum, cfg.grad_clip, lr, device).loss)
        step += 1
        rows += global_batch_rows(cfg)
        if step == save_at:
            ckpt.save(save_to, model, optimizer, step, rows, rank)
    if rank == 0:
        torch.save({"first_step": first, "losses": losses}, out)
    leave()  # a process that stops here after its checkpoint is the run killed at stop_at


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tmp, name: str, cfg: TrainConfig, stop_at: int, start=None, save_at=None, rows_shift: int = 0,
        history: int = 0) -> dict:
    out = tmp / f"{name}.pt"
    save_to = str(tmp / f"{name}-checkpoint") if save_at else None
    spawn(_worker, args=(cfg.workers, _free_port(), cfg, start and str(start), save_at, save_to, stop_at, rows_shift,
                         history, str(out)), nprocs=cfg.workers)
    return torch.load(out) | {"checkpoint": save_to}


# ---------------------------------------------------------------- 1. random state (LoRA dropout)


def _lora(world: int = 2) -> TrainConfig:
    # A large alpha and lr make the adapters move the loss within a few steps, so their dropout shows in it.
    return _config(world, 2, lora_rank=8, lora_alpha=256.0, lora_dropout=0.3)


@pytest.fixture(scope="module")
def dropout_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dropout")
    # Each run's processes come with another history: only the run's own seeding can make them agree.
    uninterrupted = run(tmp, "uninterrupted", _lora(), stop_at=STEPS + 1, history=0)
    killed = run(tmp, "killed", _lora(), stop_at=STEPS, save_at=STEPS - RESUMED_STEPS, history=1)  # stops at 5
    resumed = run(tmp, "resumed", _lora(), stop_at=STEPS + 1, start=killed["checkpoint"], history=2)
    return {"uninterrupted": uninterrupted, "killed": killed, "resumed": resumed}


def test_identical_runs_with_lora_dropout_are_identical(dropout_runs):
    # Before every rank was seeded, rank 1's dropout masks came from an unseeded generator: the runs parted at
    # step 2 (step 1's loss is the base model's, the adapters' B starting at zero).
    first, second = dropout_runs["uninterrupted"]["losses"][:STEPS], dropout_runs["killed"]["losses"]
    assert first == second


def test_a_checkpoint_holds_every_ranks_random_state(dropout_runs):
    folder = dropout_runs["killed"]["checkpoint"]
    states = [torch.load(f"{folder}/rng-rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert {"torch", "python", "numpy"} <= set(states[0])
    assert not torch.equal(states[0]["torch"], states[1]["torch"])  # seed + rank: the ranks draw different masks


def test_a_killed_run_resumed_with_dropout_matches_the_uninterrupted_one(dropout_runs):
    resumed, uninterrupted = dropout_runs["resumed"], dropout_runs["uninterrupted"]["losses"]
    assert resumed["first_step"] == STEPS - RESUMED_STEPS
    assert resumed["losses"] == uninterrupted[STEPS - RESUMED_STEPS:]


# ---------------------------------------------------------------- 2. another world size


@pytest.fixture(scope="module")
def world_runs(tmp_path_factory):
    """The uninterrupted run on 1 worker (checkpoint at step 2), one on 2 workers killed after its checkpoint at
    step 2, and the resumes across them."""
    tmp = tmp_path_factory.mktemp("world")
    at = STEPS - RESUMED_STEPS
    one = run(tmp, "one", _config(1, 2), stop_at=STEPS, save_at=at)
    two_killed = run(tmp, "two-killed", _config(2, 2), stop_at=at + 1, save_at=at)
    return {"one": one, "two_killed": two_killed, "tmp": tmp, "at": at}


def _deviation(resumed: list[float], reference: list[float]) -> float:
    return max(abs(a - b) / abs(b) for a, b in zip(resumed, reference, strict=True))


def test_a_run_checkpointed_on_two_workers_resumes_on_one(world_runs):
    tmp, at = world_runs["tmp"], world_runs["at"]
    resumed = run(tmp, "two-to-one", _config(1, 2), stop_at=STEPS, start=world_runs["two_killed"]["checkpoint"])
    assert resumed["first_step"] == at
    deviation = _deviation(resumed["losses"], world_runs["one"]["losses"][at:])
    print(f"2 -> 1 workers: largest relative loss deviation {deviation:.2e} (tolerance {TOLERANCE:.2e})")
    assert deviation <= TOLERANCE


def test_a_run_checkpointed_on_one_worker_resumes_on_two(world_runs):
    tmp, at = world_runs["tmp"], world_runs["at"]
    resumed = run(tmp, "one-to-two", _config(2, 2), stop_at=STEPS, start=world_runs["one"]["checkpoint"])
    deviation = _deviation(resumed["losses"], world_runs["one"]["losses"][at:])
    print(f"1 -> 2 workers: largest relative loss deviation {deviation:.2e} (tolerance {TOLERANCE:.2e})")
    assert deviation <= TOLERANCE


def test_a_run_checkpointed_on_two_workers_resumes_on_four(world_runs):
    tmp, at = world_runs["tmp"], world_runs["at"]
    resumed = run(tmp, "two-to-four", _config(4, 1), stop_at=STEPS, start=world_runs["two_killed"]["checkpoint"])
    deviation = _deviation(resumed["losses"], world_runs["one"]["losses"][at:])
    print(f"2 -> 4 workers: largest relative loss deviation {deviation:.2e} (tolerance {TOLERANCE:.2e})")
    assert deviation <= TOLERANCE


def test_a_resume_one_global_batch_off_misses_the_tolerance(world_runs):
    """The tolerance tells the right data from the next batch's: the pattern data's sequences all differ."""
    tmp, at = world_runs["tmp"], world_runs["at"]
    off = run(tmp, "off-by-one", _config(1, 2), stop_at=STEPS, start=world_runs["two_killed"]["checkpoint"],
              rows_shift=GLOBAL_SEQUENCES)
    deviation = _deviation(off["losses"], world_runs["one"]["losses"][at:])
    print(f"one global batch off: largest relative loss deviation {deviation:.2e}")
    assert deviation > 10 * TOLERANCE


def test_the_data_position_is_counted_in_global_rows(world_runs):
    # Two steps of 4 sequences, whichever world size wrote it.
    for name in ("one", "two_killed"):
        assert ckpt.read_train_state(world_runs[name]["checkpoint"]) == (2, 8)
