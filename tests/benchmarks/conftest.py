"""Shared fixtures of the benchmark tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def event_ms(monkeypatch):
    """torch.cuda.Event on the CPU: each timed interval takes the next of the listed milliseconds."""
    times: list[float] = []

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return times.pop(0)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return times
