"""benchmarks.worker's GPU probes timed on the CPU with stand-in CUDA events (their figures worked by hand), the
NaN refusal of time_steps, and a peer's step as Hugging Face users write it."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from benchmarks import worker


def test_median_seconds_runs_three_untimed_calls_then_takes_the_median_in_seconds(event_ms):
    calls = []
    event_ms.extend([5.0, 1.0, 3.0])
    assert worker._median_seconds(lambda: calls.append(1), 3) == pytest.approx(0.003)
    assert len(calls) == 3 + 3 and not event_ms


def test_fp8_cube_rate_is_two_n_cubed_flops_over_the_median_time(event_ms):
    event_ms.extend([4.0, 2.0, 1.0])
    # n = 16: 2 * 16**3 = 8,192 FLOP in the 2 ms median = 4.096e6 FLOP/s = 4.096e-6 TFLOP/s.
    assert worker.fp8_matmul_rate(torch.device("cpu"), 16, 3) == pytest.approx(4.096e-6)


@pytest.mark.parametrize("capability, fp8", [((8, 9), True), ((8, 6), False), ((9, 0), True)],
                         ids=["L4 sm89", "A10 sm86", "H100 sm90"])
def test_matmul_rates_are_tflops_of_each_shape_and_fp8_only_from_sm89(capability, fp8, event_ms, monkeypatch):
    # Each matmul takes 1 s (1,000 ms) by the stand-in events; the operands are 1x1 so that the CPU does no work.
    monkeypatch.setattr(torch, "randn", lambda *shape, **kwargs: torch.ones(1, 1, dtype=kwargs.get("dtype")))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(worker, "fp8_matmul_rate", lambda device, n, repeats: ("fp8", n, repeats))
    event_ms.extend([1000.0] * 5 * 2)
    rates = worker.matmul_rates(torch.device("cpu"), repeats=2)
    # 2 m k n / 1 s / 1e12.
    expected = {"8192x8192x8192": 1.099511627776, "lm_head 32768x1536x151936": 15.294378541056,
                "gate+up 32768x1536x17920": 1.80388626432, "down 32768x8960x1536": 0.90194313216,
                "qkv 32768x1536x2048": 0.206158430208}
    assert {k: v for k, v in rates.items() if k != worker.FP8_CUBE} == pytest.approx(expected)
    assert rates.get(worker.FP8_CUBE) == (("fp8", 8192, 2) if fp8 else None)


def test_only_the_forward_gemm_of_each_converted_linear_uses_fast_accumulation(monkeypatch):
    # torchao's Float8LinearConfig: use_fast_accum in the output GEMM only, not in grad_input or grad_weight.
    fast = []

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum):
        fast.append((tuple(a.shape), tuple(b.shape), out_dtype, use_fast_accum))

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    monkeypatch.setattr(worker, "_median_seconds", lambda run, repeats: (run(), 1e-3)[1])
    worker.linear_gemm_rates(torch.device("cpu"), "tiny", (8,))
    # The tiny model: hidden 64, intermediate 128; 8 tokens. Each layer's forward, grad_input, grad_weight in turn.
    bf16 = torch.bfloat16
    assert fast == [((8, 64), (64, 64), bf16, True), ((8, 64), (64, 64), bf16, False), ((64, 8), (8, 64), bf16, False),
                    ((8, 64), (64, 128), bf16, True), ((8, 128), (128, 64), bf16, False), ((128, 8), (8, 64), bf16, False),
                    ((8, 128), (128, 64), bf16, True), ((8, 64), (64, 128), bf16, False), ((64, 8), (8, 128), bf16, False)]


def test_a_nan_final_loss_is_refused_and_a_nan_only_in_the_warm_up_is_not(monkeypatch):
    monkeypatch.setattr(dist, "barrier", lambda: None)
    losses = iter([float("nan"), 2.0, 1.5])
    assert worker.time_steps(lambda i: torch.tensor(next(losses)), 1, 2, torch.device("cpu"))["final_loss"] == 1.5
    losses = iter([3.0, 2.0, float("nan")])
    with pytest.raises(RuntimeError, match="^the loss is NaN$"):
        worker.time_steps(lambda i: torch.tensor(next(losses)), 1, 2, torch.device("cpu"))


def test_a_hf_peer_step_clips_at_1_updates_then_runs_after_update_and_clears_the_gradients(monkeypatch):
    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.tensor([2.0]))

        def forward(self, input_ids, labels, use_cache):
            assert labels is input_ids and use_cache is False
            return type("Out", (), {"loss": (self.weight * input_ids.float()).sum()})

    events = []
    lm = LM()
    optimizer = torch.optim.SGD(lm.parameters(), lr=0.5)
    real_clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                        lambda params, max_norm: events.append(("clip", max_norm)) or real_clip(params, max_norm))
    monkeypatch.setattr(optimizer, "step", lambda real=optimizer.step: events.append("step") or real())
    step = worker._hf_peer_step(lm, optimizer, iter([{"input_ids": torch.tensor([3])}]), torch.device("cpu"),
                                after_update=lambda: events.append(("after", lm.weight.item())))
    loss = step(0)
    # loss 2 * 3 = 6; its gradient 3 clipped to norm 1; SGD at 0.5: 2 - 0.5 = 1.5, seen by after_update.
    assert loss.item() == 6.0 and not loss.requires_grad
    assert events == [("clip", 1.0), "step", ("after", pytest.approx(1.5, abs=1e-5))]  # unclipped: 2 - 0.5 * 3 = 0.5
    assert lm.weight.grad is None
