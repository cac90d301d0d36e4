"""The levers a case may pull, each a context manager that changes one thing in the trainer's step (attention
kernel, Liger kernels, host guard, garbage collection, symmetric memory...), and the attention backend picked.
"""

from __future__ import annotations

import contextlib
import gc
from unittest import mock

from training.config import TrainConfig


# The peer recipe of --suite mfu: what a user of TRL or accelerate writes for the same job (FSDP2 over
# Hugging Face's model, Liger's Triton kernels for RoPE, RMSNorm, SwiGLU and the fused linear loss,
# no torch.compile, fused AdamW, gradient clipping at 1.0).
PEER_MODULE = "liger_kernel"


# --suite mfu: the levers on the h200 profile's step, each alone and the promising ones together,
# next to the peer recipe in the same run. A lever is entered around the case's model build and steps.


@contextlib.contextmanager
def _cudnn_attention():
    """SDPA tries cuDNN's attention first (Hopper kernels), then flash, efficient, math."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(order, set_priority=True):
        yield


def _repeat_kv():
    """Hugging Face's SDPA call expands the 2 key/value heads to 12 instead of passing enable_gqa
    (a backend without grouped-query support then still qualifies)."""
    from transformers.integrations import sdpa_attention

    return mock.patch.object(sdpa_attention, "use_gqa_in_sdpa", lambda *args, **kwargs: False)


@contextlib.contextmanager
def _coordinate_descent():
    """Inductor tunes the launch configuration of its generated (norm, SwiGLU, loss) kernels."""
    import torch._inductor.config as inductor

    with inductor.patch(coordinate_descent_tuning=True):
        yield


@contextlib.contextmanager
def _fp8_recipe(make):
    """training.fp8's float8 config replaced by make() (convert_to_fp8 reads it when it converts)."""
    from training import fp8

    with mock.patch.object(fp8, "float8_config", lambda all_gather_in_float8=True, emulate=False: make()):
        yield


def _fp8_rowwise():
    """torchao's rowwise recipe (one scale per row, CUTLASS's rowwise GEMM; weights gathered in bf16)."""
    from torchao.float8 import Float8LinearConfig

    return _fp8_recipe(lambda: Float8LinearConfig.from_recipe_name("rowwise"))


def _fp8_bf16_all_gather():
    """Tensorwise float8 with the weights all-gathered in bf16 and cast after the gather."""
    from torchao.float8 import Float8LinearConfig

    return _fp8_recipe(lambda: Float8LinearConfig(enable_fsdp_float8_all_gather=False))


def _fp8_kv():
    """float8 on the attention k/v projections too (training.fp8 leaves them bf16: 256 outputs on Qwen2.5-1.5B)."""
    from training import fp8

    return mock.patch.object(fp8, "FP8_LINEARS", fp8.FP8_LINEARS + ("k_proj", "v_proj"))


def _max_autotune():
    """Each decoder layer compiled with Inductor's max-autotune (no CUDA graphs): it times Triton GEMM templates
    against cuBLAS for each matmul, float8's _scaled_mm included, and may fuse the neighbouring pointwise kernels
    (a scale, a cast) into a template's epilogue."""
    import training.model

    def compile_layers(model):
        for layer in model.decoder_layers:
            layer.compile(mode="max-autotune-no-cudagraphs")

    return mock.patch.object(training.model, "apply_compile", compile_layers)


@contextlib.contextmanager
def _liger_kernels():
    """Liger's RoPE, RMSNorm and SwiGLU modules in place of Hugging Face's, inside the trainer's compiled
    layers (its own fused loss stays)."""
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2
    from transformers.models.qwen2 import modeling_qwen2

    # Set to what they are now, so that leaving restores them over Liger's replacements.
    names = ("Qwen2RMSNorm", "Qwen2MLP", "apply_rotary_pos_emb")
    with mock.patch.multiple(modeling_qwen2, **{name: getattr(modeling_qwen2, name) for name in names}):
        apply_liger_kernel_to_qwen2(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)
        yield


def _host_guard():
    """The step's finiteness guard as it was: the host waits for the loss and the norm, then launches
    the update (training.step.train_step now launches a fused optimizer first, told to skip on the device)."""
    import training.step

    return mock.patch.object(training.step, "skips_on_device", lambda optimizer: False)


def _copied_accumulation():
    """The fused loss's head-gradient sum as it was: each chunk's fp32 product into a new tensor, copied
    into the accumulator (now added in place)."""
    import torch

    import training.loss

    return mock.patch.object(training.loss, "_add_outer_fp32", lambda accumulator, grad_logits, chunk: accumulator.copy_(
        torch.addmm(accumulator, grad_logits.t(), chunk, out_dtype=torch.float32)))


def _read_after_update():
    """The step's numbers read as they were: after the update is launched, so the host waits for the whole
    step, update included, and every step starts on an idle GPU (now only their own copy is waited for)."""
    import training.step

    return mock.patch.object(training.step, "on_host", lambda values: values.tolist)


def _transformers_masks():
    """The attention masks as transformers builds them inside the model: it checks the positions for packed
    documents by reading them back to the host, a sync in every forward (training.model.attention_masks)."""
    import torch
    from transformers.masking_utils import create_causal_mask

    import training.model

    def masks(config, embeds, position_ids):
        positions = torch.arange(embeds.shape[1], device=embeds.device)[None] if position_ids is None else position_ids
        return {"full_attention": create_causal_mask(config=config, inputs_embeds=embeds, attention_mask=None,
                                                     past_key_values=None, position_ids=positions)}

    return mock.patch.object(training.model, "attention_masks", masks)


@contextlib.contextmanager
def _no_automatic_gc():
    """Python's collector kept from running inside the steps: what exists is frozen out of its scans and the
    automatic passes are off (a full pass over a heap of modules and hooks, at a random step)."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


def _fsdp_units_after_apply(configure):
    """training.model.apply_fsdp, then configure(unit) on each FSDP unit it made (a communication setting)."""
    from torch.distributed.fsdp import FSDPModule

    import training.model

    apply = training.model.apply_fsdp

    def apply_then_configure(model, *args, **kwargs):
        apply(model, *args, **kwargs)
        for unit in model.modules():
            if isinstance(unit, FSDPModule):
                configure(unit)

    return mock.patch.object(training.model, "apply_fsdp", apply_then_configure)


def _symmetric_memory():
    """FSDP2 all-gathers from NCCL symmetric memory (torchtitan's fsdp symmetric-memory option: sum-only
    reductions, then set_symm_mem_for_comm). Under NCCL_CTA_POLICY=2 (zero CTAs) NCCL copies with the copy
    engines on one node: the gathers take no SM from the overlapped matmuls (PyTorch's docs, "Copy Engine
    Collectives")."""
    import torch
    from torch.distributed.fsdp import FSDPModule

    if not hasattr(FSDPModule, "set_symm_mem_for_comm"):  # the device image's torch 2.11 lacks it; 2.13 has it
        raise RuntimeError(f"symmetric-memory: torch {torch.__version__} has no FSDPModule.set_symm_mem_for_comm")

    def configure(unit):
        unit.set_force_sum_reduction_for_comms(True)
        unit.set_symm_mem_for_comm()

    return _fsdp_units_after_apply(configure)


def _process_group_memory():
    """FSDP2's staging buffers come from NCCL's allocator and reductions are sums: NCCL can then register them
    and transfer without its own copies (set_allocate_memory_from_process_group_for_comm's docs)."""
    def configure(unit):
        unit.set_force_sum_reduction_for_comms(True)
        unit.set_allocate_memory_from_process_group_for_comm(True)

    return _fsdp_units_after_apply(configure)


LEVERS = {"fp8-rowwise": _fp8_rowwise, "fp8-bf16-all-gather": _fp8_bf16_all_gather, "fp8-kv": _fp8_kv,
          "max-autotune": _max_autotune,
          "cudnn-attention": _cudnn_attention, "repeat-kv": _repeat_kv,
          "coordinate-descent": _coordinate_descent, "liger-kernels": _liger_kernels,
          "host-guard": _host_guard, "copied-accumulation": _copied_accumulation,
          "read-after-update": _read_after_update, "transformers-masks": _transformers_masks,
          "no-automatic-gc": _no_automatic_gc, "symmetric-memory": _symmetric_memory,
          "process-group-memory": _process_group_memory}


def attention_backend(device, cfg: TrainConfig) -> str:
    """The SDPA backend the dispatcher picks for this model's attention call (causal, grouped-query as
    Hugging Face passes it unless repeat-kv is entered), under the levers entered now."""
    import torch
    from torch.nn.attention import SDPBackend
    from transformers.integrations import sdpa_attention

    from training.model import model_config

    config = model_config(cfg)
    head = config.hidden_size // config.num_attention_heads
    gqa = sdpa_attention.use_gqa_in_sdpa(None, torch.empty(1, head), torch.empty(1, head))
    kv_heads = config.num_key_value_heads if gqa else config.num_attention_heads
    q = torch.empty(cfg.micro_batch, config.num_attention_heads, cfg.seq_len, head, device=device, dtype=torch.bfloat16,
                    requires_grad=True)
    kv = torch.empty(cfg.micro_batch, kv_heads, cfg.seq_len, head, device=device, dtype=torch.bfloat16, requires_grad=True)
    choice = torch._fused_sdp_choice(q, kv, kv, None, 0.0, True, scale=None, enable_gqa=gqa)
    return f"{SDPBackend(choice).name}{' (enable_gqa)' if gqa else ' (key/value heads repeated)'}"
