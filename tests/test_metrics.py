"""Metric math and the pure pieces of the trainer, without Ray or a GPU."""

from __future__ import annotations

import pytest
import torch

from training.data import synthetic_batches
from training.metrics import Throughput, datasheet_peak_tflops, flops_per_token, mfu, model_flops_per_token
from training.model import builtin_config
from training.step import lr_at


def qwen_meta():
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(builtin_config("qwen2.5-1.5b"))


def test_qwen25_15b_has_its_published_parameter_count():
    model = qwen_meta()
    assert sum(p.numel() for p in model.parameters()) == 1_543_714_304


def test_flops_per_token_is_torchtitans_count_for_qwen25_15b():
    expected = 6 * 1_543_714_304 + 12 * 28 * 12 * 128 * 4096
    assert model_flops_per_token(qwen_meta(), 4096) == expected


def test_mfu_reproduces_the_design_calibration_point():
    # 35,080 tok/s/GPU at 4096 on H200 was 50.5% of 790 TFLOP/s.
    assert mfu(35_080, flops_per_token(1_543_714_304, 28, 12, 128, 4096), 790) == pytest.approx(0.505, abs=0.001)


@pytest.mark.parametrize("name,peak", [("NVIDIA H200", 989.0), ("NVIDIA L4", 121.0), ("NVIDIA A10G", 70.0),
                                       ("NVIDIA A100-SXM4-40GB", 312.0), ("NVIDIA H100 80GB HBM3", 989.0), ("Tesla T4", None)])
def test_datasheet_peaks(name, peak):
    assert datasheet_peak_tflops(name) == peak


def test_throughput_stats_over_unlogged_steps(monkeypatch):
    clock = iter([0.0, 10.0])
    monkeypatch.setattr("training.metrics.time.perf_counter", lambda: next(clock))
    t = Throughput(tokens_per_step_per_gpu=1000, flops_per_tok=1e9, peak_tflops=1.0)
    stats = t.stats(step=10, steps=20, loss=1.0, lr=1e-4, grad_norm=1.0, peak_mem=0.0)
    assert stats.tokens_per_s_per_gpu == 1000 and stats.step_time_s == 1.0
    assert stats.mfu == pytest.approx(1.0) and stats.eta_s == 10
    assert "tok/s/gpu" in stats.line() and "eta 0m10s" in stats.line()


def schedule(steps: int, warmup: int, peak: float = 1.0, floor: float = 0.1) -> list[float]:
    """The learning rates the training loop uses: lr_at(step) for step 0 .. steps-1."""
    return [lr_at(step, peak, warmup, steps, floor) for step in range(steps)]


def test_warmup_reaches_the_peak_once_then_decays_to_the_floor_on_the_last_step():
    lrs = schedule(100, warmup=10)
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs.count(max(lrs)) == 1 and lrs[10] < 1.0
    assert lrs[-1] == pytest.approx(0.1)  # the floor, on the step the loop really runs
    assert all(a > b for a, b in zip(lrs[9:], lrs[10:]))  # strictly decreasing after the peak
    assert lrs[54] == pytest.approx(0.55)  # halfway through the decay: (peak + floor) / 2


def test_without_warmup_the_first_step_is_the_peak_and_the_last_the_floor():
    lrs = schedule(50, warmup=0)
    assert lrs[0] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)


def test_warmup_longer_than_the_run_only_warms_up():
    assert schedule(5, warmup=10) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_a_one_step_run_uses_the_peak():
    assert schedule(1, warmup=0) == pytest.approx([1.0])


def test_throughput_after_a_resume_counts_only_the_steps_this_process_ran(monkeypatch):
    clock = iter([100.0, 102.0])
    monkeypatch.setattr("training.metrics.time.perf_counter", lambda: next(clock))
    meter = Throughput(tokens_per_step_per_gpu=1000, flops_per_tok=1e9, peak_tflops=1.0, start_step=50)
    stats = meter.stats(step=51, steps=60, loss=1.0, lr=1e-4, grad_norm=1.0, peak_mem=0.0)
    assert stats.step_time_s == pytest.approx(2.0)  # not 2 s / 51 steps
    assert stats.tokens_per_s_per_gpu == pytest.approx(500.0) and stats.mfu == pytest.approx(0.5)
    assert stats.eta_s == pytest.approx(18.0)


def test_synthetic_batches_do_not_depend_on_world_size():
    one = next(synthetic_batches("pattern", 3, 512, 16, 4, rank=0, world_size=1, position=2))
    halves = [next(synthetic_batches("pattern", 3, 512, 16, 2, rank=r, world_size=2, position=2)) for r in (0, 1)]
    assert torch.equal(one, torch.cat(halves))


def test_pattern_data_is_an_arithmetic_progression():
    block = next(synthetic_batches("pattern", 0, 512, 16, 1, 0, 1))[0]
    steps = (block[1:] - block[:-1]) % 512
    assert len(set(steps.tolist())) == 1
