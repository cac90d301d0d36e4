"""benchmarks/levers.py: each lever, entered, changes what its name says in the trainer's code, and leaving it
restores the trainer's own."""

from __future__ import annotations

import gc

import pytest
import torch

from benchmarks.levers import LEVERS


def test_fp8_rowwise_makes_the_trainers_float8_config_torchaos_rowwise_recipe():
    from torchao.float8 import Float8LinearConfig

    from training import fp8

    with LEVERS["fp8-rowwise"]():
        config = fp8.float8_config()
    assert config == Float8LinearConfig.from_recipe_name("rowwise")
    assert fp8.float8_config() == Float8LinearConfig(enable_fsdp_float8_all_gather=True)  # tensorwise again


def test_fp8_bf16_all_gather_keeps_tensorwise_scaling_and_gathers_the_weights_in_bf16():
    from torchao.float8 import Float8LinearConfig

    from training import fp8

    with LEVERS["fp8-bf16-all-gather"]():
        config = fp8.float8_config()
    assert config == Float8LinearConfig(enable_fsdp_float8_all_gather=False)


def test_fp8_kv_adds_the_key_and_value_projections_to_the_converted_layers():
    from training import fp8

    before = fp8.FP8_LINEARS
    with LEVERS["fp8-kv"]():
        assert fp8.FP8_LINEARS == before + ("k_proj", "v_proj")
    assert fp8.FP8_LINEARS == before


def test_max_autotune_compiles_each_decoder_layer_in_max_autotune_without_cuda_graphs():
    import training.model

    modes = []

    class Layer:
        def compile(self, **kwargs):
            modes.append(kwargs)

    class Model:
        decoder_layers = [Layer(), Layer()]

    own = training.model.apply_compile
    with LEVERS["max-autotune"]():
        training.model.apply_compile(Model())
    assert modes == [{"mode": "max-autotune-no-cudagraphs"}] * 2
    assert training.model.apply_compile is own


def test_host_guard_makes_the_step_wait_on_the_host_even_for_an_optimizer_that_skips_on_the_device():
    import training.step

    fused = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], fused=True)
    assert training.step.skips_on_device(fused)
    with LEVERS["host-guard"]():
        assert not training.step.skips_on_device(fused)
    assert training.step.skips_on_device(fused)


def test_read_after_update_reads_the_steps_numbers_with_tolist():
    import training.step

    values = torch.tensor([1.5, 2.5])
    with LEVERS["read-after-update"]():
        read = training.step.on_host(values)
    assert read() == [1.5, 2.5] and read.__name__ == "tolist"


def test_coordinate_descent_turns_inductors_tuning_on_inside_only():
    import torch._inductor.config as inductor

    assert not inductor.coordinate_descent_tuning
    with LEVERS["coordinate-descent"]():
        assert inductor.coordinate_descent_tuning
    assert not inductor.coordinate_descent_tuning


def test_repeat_kv_stops_transformers_passing_grouped_query_attention_to_sdpa():
    from transformers.integrations import sdpa_attention

    own = sdpa_attention.use_gqa_in_sdpa
    with LEVERS["repeat-kv"]():
        assert sdpa_attention.use_gqa_in_sdpa(None, torch.empty(1, 8), torch.empty(1, 8)) is False
    assert sdpa_attention.use_gqa_in_sdpa is own


def test_no_automatic_gc_disables_collection_inside_and_reenables_it_after():
    assert gc.isenabled()
    with LEVERS["no-automatic-gc"]():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_cudnn_attention_puts_cudnn_first_in_sdpas_priority_order_inside_only():
    """sdpa_kernel alone only limits the backends SDPA may pick, in its default order (flash first); set_priority
    makes the list an order. The order is what PyTorch itself holds (torch._C._get_sdp_priority_order)."""
    from torch.nn.attention import SDPBackend

    before = torch._C._get_sdp_priority_order()
    with LEVERS["cudnn-attention"]():
        assert torch._C._get_sdp_priority_order()[0] == int(SDPBackend.CUDNN_ATTENTION)
    assert torch._C._get_sdp_priority_order() == before
