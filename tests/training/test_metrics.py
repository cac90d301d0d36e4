"""Metric math and the pure pieces of the trainer, without Ray or a GPU."""

from __future__ import annotations

import pytest
import torch

from training.data import synthetic_batches
from training.metrics import Throughput, datasheet_peak_tflops, flops_per_token, mfu, model_flops_per_token
from training.model import builtin_config
from training.schedule import lr_at, step_output


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
    assert (stats.step, stats.steps, stats.peak_mem_gib) == (10, 20, 0.0)
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


def test_a_two_step_run_goes_from_the_peak_to_the_floor():
    assert schedule(2, warmup=0) == pytest.approx([1.0, 0.1])


def test_past_the_last_step_the_floor_holds():
    assert lr_at(150, 1.0, 10, 100, 0.1) == pytest.approx(0.1)


def test_a_one_step_run_uses_the_peak():
    assert schedule(1, warmup=0) == pytest.approx([1.0])


@pytest.mark.parametrize("eval_every, validating, recorded, evaluated", [
    (3, True, [3, 4, 6, 8, 9, 10], [3, 6, 9, 10]),  # every 3rd step evaluates, though only every 4th logs
    (0, True, [4, 8, 10], [10]),  # --eval-every 0: at the end only
    (3, False, [4, 8, 10], []),  # no validation data: nothing to evaluate
])
def test_a_scheduled_evaluation_is_recorded_whatever_log_every(eval_every, validating, recorded, evaluated):
    """--steps 10 --log-every 4: records at steps 4, 8 and the last (10); --eval-every 3 (TrainConfig: steps between
    validation passes) adds steps 3, 6 and 9, each a record carrying its val_loss."""
    outputs = {step: step_output(step, 10, 4, eval_every, validating) for step in range(1, 11)}
    assert [step for step, (record, _) in outputs.items() if record] == recorded
    assert [step for step, (_, evaluates) in outputs.items() if evaluates] == evaluated


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
    for key in ("input_ids", "labels"):
        assert torch.equal(one[key], torch.cat([h[key] for h in halves]))


def test_pattern_data_is_an_arithmetic_progression():
    batch = next(synthetic_batches("pattern", 0, 512, 16, 1, 0, 1))
    block = torch.cat([batch["input_ids"][0], batch["labels"][0, -1:]])
    steps = (block[1:] - block[:-1]) % 512
    assert len(set(steps.tolist())) == 1
    assert torch.equal(batch["labels"][0, :-1], batch["input_ids"][0, 1:])  # labels: the next token


@pytest.mark.parametrize("seconds,text", [(-5, "0m00s"), (0, "0m00s"), (59.9, "0m59s"), (61, "1m01s"), (3540, "59m00s"),
                                          (3599, "59m59s"), (7140, "1h59m00s"),
                                          (3600, "1h00m00s"), (3661, "1h01m01s"), (90061, "25h01m01s")])
def test_durations(seconds, text):
    from training.metrics import _duration

    assert _duration(seconds) == text


def stats(**changes):
    from training.metrics import StepStats

    base = dict(time="2026-11-30T12:00:00Z", step=7, steps=100, loss=2.5, lr=3e-4, grad_norm=0.5,
                tokens_per_s_per_gpu=12345.6, tflops_per_gpu=140.25, mfu=0.4321, peak_mem_gib=17.25,
                step_time_s=0.6634, eta_s=3700)
    return StepStats(**(base | changes))


def test_the_step_line_in_full():
    assert stats().line() == ("2026-11-30T12:00:00Z step     7/100 | loss  2.5000 | lr 3.00e-04 | gnorm  0.500 |    12,346 "
                              "tok/s/gpu |  140.25 TFLOP/s/gpu mfu  43.2% mem  17.2GiB |   663.4 ms/step | eta 1h01m40s")
    assert stats(mfu=None, peak_mem_gib=0.0, val_loss=2.0, val_ppl=7.389).line() == (
        "2026-11-30T12:00:00Z step     7/100 | loss  2.5000 | val  2.0000 ppl 7.39 | lr 3.00e-04 | gnorm  0.500 |    12,346 "
        "tok/s/gpu |  140.25 TFLOP/s/gpu |   663.4 ms/step | eta 1h01m40s")


def test_the_record_keeps_mfu_even_when_unknown_and_validation_only_when_measured():
    assert "mfu" in stats(mfu=None).fields() and stats(mfu=None).fields()["mfu"] is None
    assert "val_loss" not in stats().fields() and stats(val_loss=2.0, val_ppl=7.4).fields()["val_ppl"] == 7.4


def test_utc_timestamps():
    import re

    from training.metrics import utc_now

    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", utc_now())


def test_rates_in_units():
    from training.metrics import rates

    assert rates(4096, 0.5, 1e10, 100.0) == pytest.approx((8192.0, 81.92, 0.8192))
    assert rates(4096, 0.5, 1e10, None)[2] is None


def test_a_step_measured_with_no_elapsed_time_is_not_a_division_by_zero(monkeypatch):
    monkeypatch.setattr("training.metrics.time.perf_counter", lambda: 5.0)
    t = Throughput(tokens_per_step_per_gpu=1000, flops_per_tok=1e9, peak_tflops=None)
    s = t.stats(1, 10, 1.0, 1e-3, 1.0, 0.0)
    assert s.step_time_s == pytest.approx(1e-9) and s.time.endswith("Z")


def test_parameters_count_a_tied_weight_once_and_can_leave_the_embedding_out():
    import torch

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(10, 4)
            self.proj = torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed_tokens.weight

    from training.metrics import count_params

    assert count_params(Tied()) == 40 + 20
    assert count_params(Tied(), exclude_embedding=True) == 20


@pytest.mark.parametrize("name,gpu", [("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("NVIDIA A10G", "A10G"),
                                      ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-80GB", "A100"), ("Radeon", None)])
def test_device_names_match_the_longest_model_name(name, gpu):
    from training.gpus import gpu_for_device_name

    found = gpu_for_device_name(name)
    assert (found.name if found else None) == gpu


def test_throughput_after_a_reset_measures_from_the_reset(monkeypatch):
    clock = iter([0.0, 50.0, 52.0])
    monkeypatch.setattr("training.metrics.time.perf_counter", lambda: next(clock))
    t = Throughput(tokens_per_step_per_gpu=1000, flops_per_tok=1e9, peak_tflops=None)
    t.reset(8)  # a checkpoint or an evaluation ended at 50 s, after step 8
    assert t.stats(step=10, steps=20, loss=1.0, lr=1e-4, grad_norm=1.0, peak_mem=2.5).step_time_s == pytest.approx(1.0)


def test_peak_memory_is_the_cuda_allocators_high_water_mark_in_gib(monkeypatch):
    from training.metrics import peak_memory_gib

    seen = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: seen.append(device) or 3 * 2**30)
    assert peak_memory_gib(torch.device("cuda", 1)) == 3.0 and seen == [torch.device("cuda", 1)]
    assert peak_memory_gib(torch.device("cpu")) == 0.0


def test_utc_timestamps_whatever_the_local_zone(monkeypatch):
    import datetime
    import time

    from training.metrics import utc_now

    monkeypatch.setenv("TZ", "America/Los_Angeles")
    time.tzset()
    try:
        before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0, tzinfo=None)
        stamp = datetime.datetime.strptime(utc_now(), "%Y-%m-%dT%H:%M:%SZ")
        assert datetime.timedelta(0) <= stamp - before <= datetime.timedelta(seconds=2)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_flops_use_the_configs_head_dim_and_leave_an_untied_embedding_out():
    from types import SimpleNamespace

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = SimpleNamespace(head_dim=32, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                          tie_word_embeddings=False)
            self.embed_tokens = torch.nn.Embedding(100, 64)
            self.lm_head = torch.nn.Linear(64, 100, bias=False)

    assert model_flops_per_token(Model(), 512) == 6 * 6400 + 12 * 2 * 4 * 32 * 512


def test_each_logged_interval_is_measured_from_the_previous_log(monkeypatch):
    """Logs at steps 10 (t = 10 s) and 20 (t = 15 s): the second interval is 5 s over 10 steps, 0.5 s per step,
    so 1000 tokens per step make 2000 tok/s; not 15 s / 20 steps since the start (1333 tok/s)."""
    clock = iter([0.0, 10.0, 15.0])
    monkeypatch.setattr("training.metrics.time.perf_counter", lambda: next(clock))
    t = Throughput(tokens_per_step_per_gpu=1000, flops_per_tok=1e9, peak_tflops=None)
    assert t.stats(step=10, steps=40, loss=1.0, lr=1e-4, grad_norm=1.0, peak_mem=0.0).step_time_s == pytest.approx(1.0)
    second = t.stats(step=20, steps=40, loss=1.0, lr=1e-4, grad_norm=1.0, peak_mem=0.0)
    assert second.step_time_s == pytest.approx(0.5) and second.tokens_per_s_per_gpu == pytest.approx(2000.0)
    assert second.eta_s == pytest.approx(10.0)  # 20 steps left at 0.5 s
