"""benchmarks/parity.py: what each phase of a run does (the warm start, the branches, the validation), recorded
from one small in-process run on the CPU."""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

import pytest

from benchmarks import parity


def small_corpus(root):
    """Twenty small source files: a corpus of a few kB, enough blocks for a few steps at seq_len 32."""
    for i in range(20):
        (root / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n" * 40)
    return root


# A subset run judged on an earlier file's tolerance (parity.earlier_tolerance's shape).
EARLIER = {"tolerance": 0.02, "file": "earlier.json", "device": "NVIDIA L4"}


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    """One run (tiny model, two held-out micro-batches, one warm step, two steps of bf16 and of fp8 in order 2) over a small corpus, recording in
    call order: each stream order_batches is asked for ("orders": training or held out, data order), each model built
    ("built": its precision), each checkpoint saved and loaded, each step's learning rate and each evaluation's
    number of micro-batches."""
    import training.checkpoint
    import training.model
    import training.step

    root = small_corpus(tmp_path_factory.mktemp("corpus"))
    real_corpus, real_order_batches = parity.corpus, parity.order_batches
    real_build, real_save, real_load = training.model.build_model, training.checkpoint.save, training.checkpoint.load
    real_step, real_evaluate = training.step.train_step, training.step.evaluate
    streams, seen = {}, {"orders": [], "built": [], "saved": [], "loaded": [], "lr": [], "evaluated": []}

    def corpus(_root, validation):
        streams[validation] = real_corpus(root, validation)
        return streams[validation]

    def order_batches(stream, seq_len, micro_batch, order, rank, world):
        seen["orders"].append(("held out" if stream is streams.get(True) else "training", order))
        return real_order_batches(stream, seq_len, micro_batch, order, rank, world)

    def build_model(cfg, *args, **kwargs):
        seen["built"].append(cfg.precision)
        return real_build(cfg, *args, **kwargs)

    def save(folder, model, optimizer, step, *args, **kwargs):
        seen["saved"].append((folder.name, step))
        return real_save(folder, model, optimizer, step, *args, **kwargs)

    def load(folder, *args, **kwargs):
        seen["loaded"].append(folder.name)
        return real_load(folder, *args, **kwargs)

    def train_step(model, optimizer, batches, grad_accum, grad_clip, lr, *args, **kwargs):
        seen["lr"].append(lr)
        return real_step(model, optimizer, batches, grad_accum, grad_clip, lr, *args, **kwargs)

    def evaluate(model, held, device):
        seen["evaluated"].append(len(held))
        return real_evaluate(model, held, device)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parity, "corpus", corpus)
        patch.setattr(parity, "order_batches", order_batches)
        patch.setattr(training.model, "build_model", build_model)
        patch.setattr(training.checkpoint, "save", save)
        patch.setattr(training.checkpoint, "load", load)
        patch.setattr(training.step, "train_step", train_step)
        patch.setattr(training.step, "evaluate", evaluate)
        for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("RANK", "0"),
                            ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
            patch.setenv(name, value)
        args = argparse.Namespace(out=str(tmp_path_factory.mktemp("out")), model="tiny", warm_steps=1, steps=2,
                                  seq_len=32, micro_batch=2, eval_batches=2, cpu=True,
                                  branches=[("bf16, order 2", "bf16", 2), ("fp8, order 2", "fp8", 2)],
                                  tolerance_from=None, plot=None)
        seen["args"] = args
        seen["results"] = parity.run(args, EARLIER)
    return seen


def test_the_warm_start_trains_in_data_order_0_which_no_branch_takes(phases):
    """Branches are orders 1 to 9 (parity.BRANCH_NAME): a warm start in one of them would make that order's
    branches (the control's, fp8's) begin on the very blocks the warm start just trained on."""
    training = [order for stream, order in phases["orders"] if stream == "training"]
    assert training == [0, 2, 2]  # the warm start, then each branch in its own order


def test_the_validation_is_read_once_from_the_held_out_files_in_order_0(phases):
    assert [call for call in phases["orders"] if call[0] == "held out"] == [("held out", 0)]


def test_the_warm_start_and_every_branch_are_evaluated_on_all_eval_batches(phases):
    assert phases["evaluated"] == [2, 2, 2]


def test_the_warm_start_is_bf16_and_each_branch_is_built_in_its_own_precision(phases):
    assert phases["built"] == ["bf16", "bf16", "fp8"]
    assert [run["precision"] for run in phases["results"]["runs"].values()] == ["bf16", "fp8"]


def test_every_branch_resumes_from_the_warm_checkpoint_saved_at_the_end_of_the_warm_steps(phases):
    assert phases["saved"] == [("warm", 1)]
    assert phases["loaded"] == ["warm", "warm"]


def test_the_warm_step_runs_at_the_trainers_peak_and_each_branch_decays_from_branch_lr_to_a_tenth(phases):
    """The warm start at TrainConfig's default lr, 3e-4; a branch of two steps at BRANCH_LR (1e-4), then its tenth
    on the last step (cosine to a tenth, training.schedule.lr_at's rule)."""
    assert phases["lr"] == pytest.approx([3e-4, 1e-4, 1e-5, 1e-4, 1e-5])


def test_parity_json_keeps_the_earlier_tolerance_so_plot_judges_it_as_the_run_did(phases):
    written = json.loads((Path(phases["args"].out) / "parity.json").read_text())
    assert written["earlier"] == EARLIER
    assert parity.verdict_lines(written["runs"], written.get("earlier"))[0].startswith(
        "tolerance: 2.000%, from earlier.json (NVIDIA L4)")
