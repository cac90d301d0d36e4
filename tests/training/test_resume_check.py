"""A resume is decided on the driver, before Ray starts: a run's newest checkpoint resumes only under the
settings that made it (the model, the data order, the optimisation), on any number of workers."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from training import train
from training.checkpoint import read_train_state, worker_position, write_train_state
from training.command_line import parse_args
from training.config import TrainConfig, resume_changes
from training.storage import SETTINGS
from training.worker import data_position

# The run as it was checkpointed: 2 workers, a global batch of 4 sequences of 64 tokens, LoRA on every linear layer.
SAVED = ["--model=tiny", "--seq-len=64", "--batch-tokens=256", "--micro-batch=2", "--workers=2", "--steps=10",
         "--lora-rank=4", "--lora-dropout=0.1", "--sharding=full"]


def write_checkpoint(folder: Path, step: int, options: list[str], complete: bool = True) -> None:
    """A checkpoint folder at `step`, its settings those of `options`; incomplete: no DCP shards (an upload cut short)."""
    folder.mkdir(parents=True)
    if complete:
        with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.save({"weight": torch.zeros(4)}, checkpoint_id=str(folder))
    write_train_state(folder, step=step, data_position=4 * step)
    (folder / SETTINGS).write_text(json.dumps(dataclasses.asdict(parse_args(options + ["--run-name=sft"]))))


@pytest.fixture
def run_folder(tmp_path) -> Path:
    """A storage path holding run `sft` with a complete checkpoint at step 3, written under SAVED."""
    write_checkpoint(tmp_path / "runs" / "sft" / "checkpoint_000000", 3, SAVED)
    return tmp_path / "runs"


@pytest.fixture
def started(monkeypatch) -> list:
    """What reached fit (where Ray starts)."""
    calls = []
    monkeypatch.setattr(train, "fit", lambda cfg: calls.append(cfg) or {})
    return calls


def resume(run_folder, *changes: str) -> list[str]:
    return SAVED + [f"--storage-path={run_folder}", "--run-name=sft", *changes]


@pytest.mark.parametrize("change, named", [
    ("--seed=1", "--seed 0 -> 1"),
    ("--lr=1e-4", "--lr 0.0003 -> 0.0001"),
    ("--warmup-steps=5", "--warmup-steps 10 -> 5"),
    ("--min-lr-ratio=0.5", "--min-lr-ratio 0.1 -> 0.5"),
    ("--weight-decay=0.0", "--weight-decay 0.1 -> 0.0"),
    ("--grad-clip=0.5", "--grad-clip 1.0 -> 0.5"),
    ("--reduce-dtype=bf16", "--reduce-dtype 'fp32' -> 'bf16'"),
    ("--steps=20", "--steps 10 -> 20"),
    ("--seq-len=32 --batch-tokens=128", "--seq-len 64 -> 32"),  # the same 4 sequences a step, shorter
    ("--data=random", "--data 'pattern' -> 'random'"),
    ("--no-shuffle", "--shuffle True -> False"),
    ("--lora-rank=8", "--lora-rank 4 -> 8"),
    ("--lora-alpha=32", "--lora-alpha 16.0 -> 32.0"),
    ("--lora-dropout=0.0", "--lora-dropout 0.1 -> 0.0"),
    # Used to reach the checkpoint loader on the workers and fail there with DCP's "Missing key".
    ("--lora-target-modules=q_proj,v_proj", "--lora-target-modules 'all-linear' -> 'q_proj,v_proj'"),
    ("--batch-tokens=512", "global batch (--batch-tokens / --seq-len, or --workers x --micro-batch x --grad-accum) "
                           "4 -> 8 sequences"),
])
def test_a_changed_setting_is_refused_in_one_line_before_ray(run_folder, started, capsys, change, named):
    assert train.main(resume(run_folder, *change.split())) == 2
    error = capsys.readouterr().err
    assert error == (f"error: --run-name sft: its checkpoint at step 3 was trained with other settings ({named}); "
                     "resuming would change the model, the data order or the optimisation: give a new --run-name, "
                     "or the checkpoint's values\n")
    assert started == []


def test_fewer_workers_at_the_same_global_batch_resume(run_folder, started):
    assert train.main(resume(run_folder, "--workers=1")) == 0
    [cfg] = started
    assert (cfg.workers, cfg.micro_batch, cfg.grad_accum) == (1, 2, 2)  # 4 sequences a step, as on 2 workers


def test_the_same_settings_resume(run_folder, started):
    assert train.main(resume(run_folder)) == 0
    assert len(started) == 1


def test_a_new_run_name_starts_fresh_whatever_its_settings(run_folder, started):
    assert train.main(SAVED + [f"--storage-path={run_folder}", "--run-name=other", "--seed=1"]) == 0
    assert len(started) == 1


@pytest.fixture
def run_with_history(tmp_path) -> Path:
    """Run `sft` with three checkpoints under three seeds: the newest complete one (step 6, seed 1) in the folder
    that sorts first (a rerun restarts the folder numbering), an older one (step 3, seed 0), and a newer one cut
    short (step 9, seed 2), which is never loaded."""
    run = tmp_path / "runs" / "sft"
    write_checkpoint(run / "checkpoint_000001", 6, SAVED + ["--seed=1"])
    write_checkpoint(run / "checkpoint_000002", 3, SAVED)
    write_checkpoint(run / "checkpoint_000003", 9, SAVED + ["--seed=2"], complete=False)
    return tmp_path / "runs"


def test_the_checkpoint_judged_is_the_one_that_will_be_loaded(run_with_history, started, capsys):
    from training.storage import latest_checkpoint

    assert latest_checkpoint(f"{run_with_history}/sft").path.endswith("/sft/checkpoint_000001")
    assert train.main(resume(run_with_history, "--seed=1")) == 0 and len(started) == 1
    for seed in (0, 2):
        assert train.main(resume(run_with_history, f"--seed={seed}")) == 2
        assert capsys.readouterr().err.startswith(f"error: --run-name sft: its checkpoint at step 6 was trained with "
                                                  f"other settings (--seed 1 -> {seed});")
    assert len(started) == 1


def test_the_global_batch_counts_sequences_however_it_is_given():
    # 2 workers x 2 sequences x 1 micro-batch = 4 sequences; 256 tokens / 64 = 4 sequences: the same batch.
    explicit = {"workers": 2, "micro_batch": 2, "grad_accum": 1, "batch_tokens": None, "seq_len": 64}
    in_tokens = {"workers": 4, "micro_batch": "auto", "grad_accum": 1, "batch_tokens": 256, "seq_len": 64}
    assert resume_changes(explicit, in_tokens) == []


def test_the_refusal_takes_seconds_and_never_starts_ray(run_folder):
    # A fresh interpreter, as a user's rerun: the trainer's imports included, and after it, Ray never imported.
    script = ("import sys; from training.train import main; code = main(sys.argv[1:]); "
              "print('ray imported' if 'ray' in sys.modules else 'no ray'); sys.exit(code)")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script, *resume(run_folder, "--seed=1")], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    seconds = time.perf_counter() - started
    print(f"refused in {seconds:.1f} s")
    assert done.returncode == 2
    assert done.stdout == "no ray\n"
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "--seed 0 -> 1" in done.stderr
    assert seconds < 15


def test_the_checkpoint_of_a_step_records_the_rows_of_that_step_as_consumed():
    """2 workers x 2 sequences x 2 accumulation steps: 8 rows a step. A fresh run's step 3 trained rows 0-23: its
    checkpoint records 24, so a resume trains rows 24-31 (step 4) next; 16 would train step 3's rows twice. An
    attempt resumed at step 4 (position 32) records 40 for step 5, and 32 for step 4 itself (nothing trained)."""
    cfg = TrainConfig(workers=2, micro_batch=2, grad_accum=2)
    assert data_position(cfg, 3, start_step=0, start_position=0) == 24
    assert data_position(cfg, 5, start_step=4, start_position=32) == 40
    assert data_position(cfg, 4, start_step=4, start_position=32) == 32


@pytest.mark.parametrize("world, micro_batch, position", [(1, 2, 4), (2, 2, 2), (4, 1, 2)])
def test_a_global_position_is_each_workers_next_micro_batch(world, micro_batch, position):
    # 8 rows = 2 steps of 4 sequences; worker micro-step m holds global rows m*W*B ... (m+1)*W*B - 1.
    assert worker_position(8, world, micro_batch) == position


def test_a_position_inside_a_micro_step_is_refused():
    with pytest.raises(ValueError, match="data position 6 rows is not a whole number of micro-steps of 4 workers x 1"):
        worker_position(6, 4, 1)


def test_a_checkpoint_from_before_global_rows_converts_its_per_worker_position(tmp_path):
    # Written as {"step", "data_position"} per worker: 3 micro-batches on each of 2 workers x 4 sequences.
    (tmp_path / "train_state.json").write_text(json.dumps({"step": 3, "data_position": 3}))
    (tmp_path / SETTINGS).write_text(json.dumps({"workers": 2, "micro_batch": 4}))
    assert read_train_state(tmp_path) == (3, 24)


def test_a_resumed_run_keeps_the_step_records_up_to_its_checkpoint_only(tmp_path):
    """Attempt 1 logged steps 1-6 and was killed; its newest checkpoint is step 4. The resumed run retrains steps 5
    and 6, so its metrics.jsonl (and the run summary's final loss, the tracker's earlier records) start from steps
    1-4 of the file: the stale 5 and 6 kept too would put each of those steps in it twice."""
    from training.records import METRICS_FILE
    from training.worker import read_metrics_file, run_uri

    cfg = TrainConfig(storage_path=str(tmp_path), run_name="sft")
    Path(run_uri(cfg)).mkdir()
    (Path(run_uri(cfg)) / METRICS_FILE).write_text("".join(
        json.dumps({"step": step, "loss": 7.0 - step}) + "\n" for step in range(1, 7)))
    assert [(r["step"], r["loss"]) for r in read_metrics_file(cfg, up_to_step=4)] == [(1, 6.0), (2, 5.0), (3, 4.0),
                                                                                      (4, 3.0)]
    assert read_metrics_file(cfg, up_to_step=0) == []  # a fresh start under the same name keeps none
