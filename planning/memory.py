"""Memory per GPU of a layout: sharded state, gathered weights, activations and the loss chunk, and what a
GPU's memory leaves to the allocator.
"""

from __future__ import annotations

from planning.calibration import Calibration
from planning.workload import Layout, ModelShape, Workload
from training.config import SELECTIVE_EVERY
from planning.hardware import GIB
from training.gpus import GpuSpec


def memory_bytes(model: ModelShape, work: Workload, layout: Layout, shard: int, calibration: Calibration) -> float:
    """Allocated bytes per GPU at the peak of a step.

    Sharded fp32 weights and AdamW's two fp32 moments: 12 bytes per parameter over the shard group.
    Gradients: the fp32 shard after the reduce-scatter (4 bytes over the group), or, while micro-batches
    accumulate with gradient sync off, FSDP2's unsharded fp32 accumulator of every parameter (whatever
    the reduction dtype, which only sets the bytes on the links), whatever the world size; the larger
    of the two is the peak. Gathered bf16 weights: the whole
    model when kept gathered, else the root and two layers in flight. Activations: each layer's input
    with full recomputation (plus one layer being recomputed), all of them without; selective keeps all
    of them for the layers it does not checkpoint and the input of those it does (every SELECTIVE_EVERY-th,
    the last among them: plus that one being recomputed). One chunk of the fused LM head + loss.
    LoRA: the base weights are frozen bf16 (2 bytes per parameter over the group, no gradient, no
    optimizer state); the adapters take the 16 bytes of a trained parameter.
    """
    trained = model.trained_params(work.lora_rank)
    state = (12 * trained + (2 * model.params if work.lora_rank else 0)) / shard
    gradients = 4 * trained / shard
    if work.grad_accum > 1:
        gradients = max(gradients, 4 * trained)
    layer = model.layer_params / model.layers
    gathered = 2 * model.params if layout.keep_gathered else 2 * (model.root_params + 2 * layer)
    tokens = work.seq_len * work.micro_batch
    per_layer = calibration.activation_bytes * tokens * model.hidden
    layer_input = 2 * tokens * model.hidden  # bf16
    recomputed = {"none": 0, "selective": model.layers // SELECTIVE_EVERY, "full": model.layers}[work.activation_checkpointing]
    activations = (model.layers - recomputed) * per_layer + recomputed * layer_input + (per_layer if recomputed else 0)
    loss = calibration.loss_chunk_bytes * min(work.loss_chunk_tokens, tokens) * model.vocab
    return state + gradients + gathered + activations + loss


# What a GPU's memory leaves to the allocator: the CUDA context, cuBLAS workspaces and NCCL's buffers
# take about 1.5 GiB (the 24 GB L4 was emulated at a 22 GiB cap for this reason, docs/benchmarks.md).
RESERVED_OUTSIDE_ALLOCATOR = 1.5 * GIB


def usable_bytes(gpu: GpuSpec) -> float:
    return gpu.memory_gb * 1e9 - RESERVED_OUTSIDE_ALLOCATOR
