"""benchmarks/kernel_profile.py on the CPU: what a shape's levers are in force for, and the shapes it profiles."""

from __future__ import annotations

import pytest
import torch

from benchmarks import levers, worker
from benchmarks.kernel_profile import STEP_LABEL, Shape, profile_shape, shares, split_trace
from benchmarks.suites import Case
from tests.benchmarks.test_worker_more import _probe
from training.metrics import model_flops_per_token


class Built(Exception):
    """Raised by the stand-in build once it has recorded the order of events: nothing is built."""


def test_a_shapes_levers_are_in_force_while_its_model_is_built(monkeypatch, tmp_path):
    """fp8-rowwise replaces the float8 config that build_model converts with, fp8-kv the layers it converts,
    max-autotune its compile: entered after the build, 'h200 profile in fp8 rowwise' would profile tensorwise."""
    events = []
    monkeypatch.setitem(levers.LEVERS, "probe", lambda: _probe(events))

    def build(*args, **kwargs):
        events.append("build")
        raise Built

    monkeypatch.setattr(worker, "_trainer_step", build)
    with pytest.raises(Built):
        profile_shape(Shape("s", "l4", {}, ("probe",)), "tiny", torch.device("cpu"), 1, 1, tmp_path)
    assert events == ["enter", "build", "exit"]


@pytest.fixture
def stepped(monkeypatch):
    """A trainer step that adds two numbers (no model built), timed at 0.25 s a step."""
    monkeypatch.setattr(worker, "_trainer_step", lambda *args, **kwargs: (None, None, lambda i: torch.ones(2).sum()))
    monkeypatch.setattr(worker, "time_steps", lambda step, warmup, steps, device: {"step_time_s": 0.25})


@pytest.mark.parametrize("rank", [1, 3])
def test_only_rank_0_analyses_and_returns_the_profile(stepped, tmp_path, rank):
    shape = Shape("s", "l4", {"grad_accum": 2})
    assert profile_shape(shape, "tiny", torch.device("cpu"), 1, 1, tmp_path, rank=rank, world=4) is None
    assert list(tmp_path.iterdir()) == []


def test_rank_0s_profile_names_the_shapes_settings_world_and_tokens(stepped, tmp_path):
    """The l4 profile (1 x 2048, full recomputation, compiled) with 2 micro-batches: 4,096 tokens a step per GPU."""
    row = profile_shape(Shape("s", "l4", {"grad_accum": 2}, ()), "tiny", torch.device("cpu"), 1, 1, tmp_path,
                        rank=0, world=4)
    assert row["settings"] == {"seq_len": 2048, "micro_batch": 1, "grad_accum": 2, "activation_checkpointing": "full",
                               "compile": True, "reshard_after_forward": True, "precision": "bf16"}
    assert (row["world_size"], row["tokens_per_step"], row["step_s"], row["steps_timed"]) == (4, 4096, 0.25, 1)
    # FLOPs per token at the shape's 2,048-token sequences (attention's share grows with the sequence length).
    cfg = Case("s", profile="l4", overrides={"grad_accum": 2}).train_config("tiny")
    assert row["flops_per_token"] == model_flops_per_token(worker._meta_model(cfg), 2048)
    assert row["flops_per_token"] != model_flops_per_token(worker._meta_model(cfg), 1)
    assert list(tmp_path.iterdir()) == []  # the trace is removed once split


def test_a_single_step_keeps_every_kernel_even_one_launched_before_its_span_opened():
    """One step span (100-400 us): a copy launched at 50 us (before the span) runs 120-160 us, a GEMM launched at
    150 us runs 200-300 us. One step is split whole: 2 kernels, 140 us busy, idle 20 us before the first, 40 us
    between, 100 us after the last. (Only of two steps back to back is the earlier step's work left out.)"""
    def launched(name, correlation, at, start, duration):
        return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": at, "dur": 1,
                 "args": {"correlation": correlation}},
                {"ph": "X", "cat": "kernel", "name": name, "ts": start, "dur": duration, "args": {"correlation": correlation}}]

    events = [{"ph": "X", "cat": "user_annotation", "name": STEP_LABEL, "ts": 100, "dur": 300},
              *launched("Memcpy HtoD", 1, 50, 120, 40), *launched("gemm", 2, 150, 200, 100)]
    split = split_trace(events)
    assert split["kernels"] == 2 and split["busy_s"] == pytest.approx(140e-6)
    assert (split["idle_before_first_kernel_s"], split["idle_between_kernels_s"], split["idle_after_last_kernel_s"]) == \
        pytest.approx((20e-6, 40e-6, 100e-6))


def test_kernels_that_overrun_the_wall_time_leave_no_negative_idle_share():
    """800 us of matmul and 400 us of memory kernels, none overlapping (busy 1,200 us), in a 1,000 us step (the
    wall time from the host's clock can fall short of the traced kernels): shares 80% and 40%, idle 0, not -20%."""
    split = {"kernel_s": {"matmul": 800e-6, "memory": 400e-6, "communication": 0.0}, "busy_s": 1200e-6}
    assert shares(split, 1000e-6) == pytest.approx({"matmul": 0.8, "memory": 0.4, "communication": 0.0, "idle": 0.0})


def test_the_idle_time_after_the_last_kernel_counts_from_the_kernel_that_ended_last():
    """One step 0-500 us: a GEMM runs 100-400 us and, on another stream, a copy starts later (150 us) and ends
    first (200 us). The GPU idles from 400 us, the last end, not from the last kernel to start: 100 us."""
    events = [{"ph": "X", "cat": "user_annotation", "name": STEP_LABEL, "ts": 0, "dur": 500},
              {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100, "dur": 300},
              {"ph": "X", "cat": "kernel", "name": "copy", "ts": 150, "dur": 50}]
    assert split_trace(events)["idle_after_last_kernel_s"] == pytest.approx(100e-6)
