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
