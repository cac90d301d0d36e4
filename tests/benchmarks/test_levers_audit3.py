"""benchmarks.levers' levers that no other test entered: the copied head-gradient accumulation, the two FSDP
communication settings (on a recorded stand-in for each FSDP unit), and the attention call attention_backend
hands SDPA's dispatcher."""

from __future__ import annotations

import pytest
import torch

from benchmarks.levers import LEVERS, attention_backend
from training.config import TrainConfig


def test_copied_accumulation_adds_each_chunks_fp32_product_to_the_accumulator(monkeypatch):
    import training.loss

    # addmm(out_dtype=) has no CPU kernel: a stand-in with its documented meaning (input + mat1 @ mat2, in out_dtype).
    asked = []

    def addmm(input, mat1, mat2, *, out_dtype):
        asked.append(out_dtype)
        return (input + mat1.float() @ mat2.float()).to(out_dtype)

    monkeypatch.setattr(torch, "addmm", addmm)
    accumulator = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    grad_logits = torch.tensor([[1.0, 0.0], [2.0, 1.0], [0.0, 3.0]], dtype=torch.bfloat16)  # 3 tokens x 2 logits
    chunk = torch.tensor([[1.0, 1.0], [0.5, 2.0], [1.0, 0.0]], dtype=torch.bfloat16)  # 3 tokens x 2 hidden
    with LEVERS["copied-accumulation"]():
        training.loss._add_outer_fp32(accumulator, grad_logits, chunk)
    # grad_logits^T @ chunk = [[1*1 + 2*0.5 + 0, 1*1 + 2*2 + 0], [0 + 1*0.5 + 3*1, 0 + 1*2 + 0]] = [[2, 5], [3.5, 2]].
    assert asked == [torch.float32] and accumulator.dtype == torch.float32
    assert accumulator.tolist() == [[3.0, 7.0], [6.5, 6.0]]


class Recorded(torch.nn.Module):
    """A stand-in for an FSDP unit: records the communication settings made on it."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def set_force_sum_reduction_for_comms(self, value):
        self.calls.append(("force_sum_reduction", value))

    def set_symm_mem_for_comm(self):
        self.calls.append(("symm_mem",))

    def set_allocate_memory_from_process_group_for_comm(self, value):
        self.calls.append(("allocate_from_process_group", value))


@pytest.mark.parametrize("lever, expected", [
    # torchtitan's symmetric-memory option: sum-only reductions, then symmetric memory for the gathers.
    ("symmetric-memory", [("force_sum_reduction", True), ("symm_mem",)]),
    # NCCL-registered staging buffers need sum reductions too (the setter's docs).
    ("process-group-memory", [("force_sum_reduction", True), ("allocate_from_process_group", True)]),
])
def test_a_communication_lever_configures_every_fsdp_unit_after_the_trainers_apply_fsdp(lever, expected, monkeypatch):
    import torch.distributed.fsdp
    import training.model

    applied = []
    model = torch.nn.Sequential(Recorded(), torch.nn.Linear(2, 2), Recorded())
    monkeypatch.setattr(torch.distributed.fsdp, "FSDPModule", Recorded)
    monkeypatch.setattr(training.model, "apply_fsdp", lambda m, device, **kwargs: applied.append((m, device, kwargs)))
    with LEVERS[lever]():
        training.model.apply_fsdp(model, "cpu", reshard_after_forward=False)
    assert applied == [(model, "cpu", {"reshard_after_forward": False})]
    assert [model[0].calls, model[2].calls] == [expected, expected]


@pytest.mark.parametrize("repeat, kv_heads, suffix", [(False, 2, " (enable_gqa)"), (True, 12, " (key/value heads repeated)")])
def test_attention_backend_asks_for_the_models_causal_call_with_grouped_or_repeated_kv_heads(repeat, kv_heads, suffix,
                                                                                            monkeypatch):
    from torch.nn.attention import SDPBackend

    asked = {}

    def choice(q, k, v, mask, dropout, causal, scale=None, enable_gqa=False):
        asked.update(q=tuple(q.shape), k=tuple(k.shape), v=tuple(v.shape), mask=mask, dropout=dropout, causal=causal,
                     gqa=enable_gqa, dtype=q.dtype)
        return SDPBackend.EFFICIENT_ATTENTION.value

    monkeypatch.setattr(torch, "_fused_sdp_choice", choice)
    cfg = TrainConfig(model="qwen2.5-1.5b", seq_len=64, micro_batch=3)
    with LEVERS["repeat-kv"]() if repeat else torch.no_grad():
        backend = attention_backend(torch.device("cpu"), cfg)
    # Qwen2.5-1.5B: hidden 1536 over 12 query heads (head dim 128), 2 key/value heads (its published config).
    assert backend == "EFFICIENT_ATTENTION" + suffix
    assert asked == {"q": (3, 12, 64, 128), "k": (3, kv_heads, 64, 128), "v": (3, kv_heads, 64, 128), "mask": None,
                     "dropout": 0.0, "causal": True, "gqa": not repeat, "dtype": torch.bfloat16}
