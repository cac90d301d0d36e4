"""benchmarks/kernel_profile.py on the CPU: what a shape's levers are in force for, and the shapes it profiles."""

from __future__ import annotations

import contextlib

import pytest
import torch

from benchmarks import levers, worker
from benchmarks.kernel_profile import Shape, profile_shape


class Built(Exception):
    """Raised by the stand-in build once it has recorded the order of events: nothing is built."""


@contextlib.contextmanager
def _probe(events):
    events.append("enter")
    try:
        yield
    finally:
        events.append("exit")


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
    assert list(tmp_path.iterdir()) == []  # the trace is removed once split
