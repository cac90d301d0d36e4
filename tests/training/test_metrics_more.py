"""The step record the training loop logs (training.metrics.step_record), from a worked example: the counts it
gets are summed over every worker, its per-GPU figures are one GPU's share."""

from __future__ import annotations

import pytest

from training.metrics import Throughput, step_record

# Ten steps in 20 s since the last record, on `world` workers; each worker's micro-batches held 4,096 tokens a
# step, 3,000 of them real. Per GPU: 3,000 real tokens a step of 2 s = 1,500 tok/s; x 1e10 FLOPs a token =
# 15 TFLOP/s; of an L4's 121 TFLOP/s that is 12.397% MFU. Padding: 1 - 3000/4096 = 0.267578125.
STEPS_SINCE, SECONDS = 10, 20.0


def _summed(world: int) -> dict[str, int]:
    """DataCounts.take() after those ten steps: every worker's counts summed."""
    return {"tokens": world * STEPS_SINCE * 4096, "real_tokens": world * STEPS_SINCE * 3000,
            "truncated": 3, "unlearned": 2, "empty_blocks": 1}


def _record(monkeypatch, world: int, counted: bool = True):
    clock = iter([0.0, SECONDS])
    monkeypatch.setattr("training.metrics.time.perf_counter", lambda: next(clock))
    throughput = Throughput(tokens_per_step_per_gpu=4096, flops_per_tok=1e10, peak_tflops=121.0, start_step=30)
    return step_record(throughput, 30 + STEPS_SINCE, 100, 1.5, 1e-4, 0.8, 12.0, _summed(world), world, counted)


@pytest.mark.parametrize("world", [1, 2, 8])
def test_per_gpu_figures_are_one_gpus_share_of_the_real_tokens_summed_over_the_workers(monkeypatch, world):
    """Summed over 8 workers (2 x g6.12xlarge), not divided, they would read 8x the GPUs' real speed."""
    stats = _record(monkeypatch, world)
    assert stats.tokens_per_s_per_gpu == pytest.approx(1500.0)
    assert stats.tflops_per_gpu == pytest.approx(15.0)
    assert stats.mfu == pytest.approx(15.0 / 121.0)
    assert (stats.step, stats.step_time_s, stats.eta_s) == (40, 2.0, 120.0)


@pytest.mark.parametrize("world", [1, 8])
def test_padding_is_the_share_of_all_tokens_that_was_not_real(monkeypatch, world):
    assert _record(monkeypatch, world).padding == pytest.approx(0.267578125)


def test_the_data_counts_since_the_last_record_go_to_their_own_fields(monkeypatch):
    stats = _record(monkeypatch, 2)
    assert (stats.truncated, stats.unlearned, stats.empty_blocks) == (3, 2, 1)


def test_synthetic_data_has_no_padding_or_data_counts_in_its_record(monkeypatch):
    """Synthetic batches have no padding to measure: the record leaves those fields out rather than show 0%."""
    stats = _record(monkeypatch, 2, counted=False)
    assert (stats.padding, stats.truncated, stats.unlearned, stats.empty_blocks) == (None, None, None, None)
    assert "padding" not in stats.fields() and stats.tokens_per_s_per_gpu == pytest.approx(1500.0)
