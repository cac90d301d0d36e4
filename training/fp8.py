"""--precision fp8: torchao's float8 training on the decoder layers' large linear layers.

Tensorwise scaling (one scale per tensor, cuBLAS's float8 GEMM) on the attention q/o projections and the
MLP's gate/up/down projections of every layer; k/v (256 outputs on Qwen2.5-1.5B: too small for the casts
to pay), the LM head and the fused loss stay bf16, since the loss reads the head's weight directly.
Under FSDP2 the weights are all-gathered in float8 (torchao's enable_fsdp_float8_all_gather): half the
bytes of a bf16 gather, cast once from the fp32 shard before the gather instead of after it.

FP8 tensor cores exist from compute capability 8.9 (Ada: L4, L40S) and 9.0 (Hopper: H100, H200); A10G
(8.6) and A100 (8.0) have none, so fp8 is refused there, in one line, before anything is built.

Wherever state leaves the model (checkpoints, exports) it holds plain tensors (plain_tensors): the float8
all-gather keeps each converted weight inside torchao's WeightWithDynamicFloat8CastTensor, which a checkpoint
would otherwise pickle (a reader without torchao cannot load it) and an export would hand to safetensors (which
cannot read its storage). The values are the fp32 master weights either way: float8 exists only in the matmuls.
"""

from __future__ import annotations

import sys

from torch import nn

from training.config import ConfigError

# The linear layers of a Qwen2/Llama decoder layer that compute in float8.
FP8_LINEARS = ("q_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# NVIDIA's CUDA programming guide, compute capabilities: FP8 tensor cores from sm_89 (Ada) on.
FP8_MIN_CAPABILITY = (8, 9)
TORCHAO_PIN = "torchao==0.18.0"  # requirements-train.txt


def is_fp8_linear(module: nn.Module, fqn: str) -> bool:
    """One of FP8_LINEARS inside a decoder layer (`...layers.<i>....`); never the LM head."""
    parts = fqn.split(".")
    return (isinstance(module, nn.Linear) and parts[-1] in FP8_LINEARS
            and any(a == "layers" and b.isdigit() for a, b in zip(parts, parts[1:])))


def check_fp8_device(device, capability: tuple[int, int] | None = None, gpu_name: str = "") -> None:
    """ConfigError naming --precision unless this worker can run float8 matmuls with torchao.

    capability and gpu_name: the CUDA device's (read from torch when None).
    """
    import torch

    if device.type != "cuda":
        raise ConfigError(f"--precision: fp8 needs a GPU with FP8 tensor cores (compute capability "
                          f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or later: L4, L40S, H100, H200); "
                          f"this worker computes on the {device.type.upper()}; use --precision bf16")
    if capability is None:
        capability = torch.cuda.get_device_capability(device)
        gpu_name = torch.cuda.get_device_name(device)
    if tuple(capability) < FP8_MIN_CAPABILITY:
        raise ConfigError(f"--precision: fp8 needs a GPU with FP8 tensor cores (compute capability "
                          f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or later: L4, L40S, H100, H200); "
                          f"{gpu_name or 'this GPU'} is {capability[0]}.{capability[1]}; use --precision bf16")
    try:
        import torchao.float8  # noqa: F401
    except ImportError as error:
        raise ConfigError(f"--precision: fp8 needs torchao's float8 training ({TORCHAO_PIN}, requirements-train.txt), "
                          f"which does not import here ({error}); use --precision bf16") from None


def float8_config(all_gather_in_float8: bool = True, emulate: bool = False):
    """Tensorwise float8 (torchao's default recipe). emulate: float8 rounding computed in high precision
    (CPU tests); no FP8 hardware needed."""
    from torchao.float8 import Float8LinearConfig

    return Float8LinearConfig(enable_fsdp_float8_all_gather=all_gather_in_float8, emulate=emulate)


def convert_to_fp8(model: nn.Module, all_gather_in_float8: bool = True, emulate: bool = False) -> list[str]:
    """Swap the FP8_LINEARS of every decoder layer for torchao's Float8Linear, before FSDP2 shards them
    (the float8 all-gather hooks into the sharded weights). Returns the converted modules' names."""
    from torchao.float8 import convert_to_float8_training

    converted = [name for name, module in model.named_modules() if is_fp8_linear(module, name)]
    convert_to_float8_training(model, module_filter_fn=is_fp8_linear,
                               config=float8_config(all_gather_in_float8, emulate))
    return converted


def after_optimizer_step(model: nn.Module) -> None:
    """With float8 all-gather, the next step's weight scales: one fused amax over every sharded weight
    (one all-reduce) instead of one per layer inside each gather (torchao's documented FSDP2 recipe)."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    precompute_float8_dynamic_scale_for_fsdp(model)


def plain_tensors(state):
    """`state` (a state dict, nested dicts and lists of tensors) with every weight that torchao's float8 all-gather
    wraps (WeightWithDynamicFloat8CastTensor, alone or as a DTensor's local shard) replaced by the plain tensor it
    wraps, without a copy (the same storage: no second copy of the weights in GPU memory at each checkpoint).
    Everything else is returned as is; nothing is imported (where torchao was never imported, nothing is wrapped)."""
    utils = sys.modules.get("torchao.float8.fsdp_utils")
    if utils is None:
        return state
    wrapper = utils.WeightWithDynamicFloat8CastTensor

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(plain(v) for v in value)
        if isinstance(value, wrapper):
            return value._tensor
        from torch.distributed.tensor import DTensor

        if isinstance(value, DTensor) and isinstance(value._local_tensor, wrapper):
            return DTensor.from_local(value._local_tensor._tensor, value.device_mesh, value.placements,
                                      run_check=False, shape=value.shape, stride=value.stride())
        return value

    return plain(state)
