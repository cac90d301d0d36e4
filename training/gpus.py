"""The GPUs this project knows, from their vendors' datasheets: the trainer's MFU baseline (bf16 peak by
CUDA device name) and the planner's compute, memory and intra-node link figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bf16_tflops: float
    """Dense bf16 tensor-core peak, TFLOP/s (no sparsity), from the vendor's datasheet."""
    memory_gb: float
    """Device memory, GB (10^9 bytes), as the datasheet states it."""
    intra_node_link: str
    """How the GPUs of one instance talk: nvlink or pcie."""
    intra_node_gbps: float
    """Per-GPU bandwidth of that link, one direction, GB/s."""
    memory_bandwidth_gbps: float
    """Device memory bandwidth, GB/s, from the datasheet: what memory-bound kernels run at."""
    native_bf16: bool = True
    """Tensor cores that run bf16; without them bf16_tflops is the fp16 figure, no MFU baseline for bf16 training."""
    fp8_tflops: float = 0.0
    """Dense FP8 (e4m3) tensor-core peak, TFLOP/s, from the datasheet; 0 where the GPU has no FP8 tensor cores."""


# NVIDIA datasheets (memory bandwidth: A100 40 GB SXM, H100 SXM; FP8: the dense figure, half the one with sparsity
# that the datasheets print: L4 485, L40S 1,466, H100/H200 SXM 3,958 TFLOP/s). PCIe Gen4 x16: 32 GB/s each way;
# NVLink 3 (A100): 300 GB/s each way; NVLink 4 (H100, H200): 450.
GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("L4", bf16_tflops=121.0, fp8_tflops=242.5, memory_gb=24, intra_node_link="pcie", intra_node_gbps=32, memory_bandwidth_gbps=300),
    GpuSpec("L40S", bf16_tflops=362.0, fp8_tflops=733.0, memory_gb=48, intra_node_link="pcie", intra_node_gbps=32, memory_bandwidth_gbps=864),
    # AWS's A10G runs below the A10's 125 TFLOP/s.
    GpuSpec("A10G", bf16_tflops=70.0, memory_gb=24, intra_node_link="pcie", intra_node_gbps=32, memory_bandwidth_gbps=600),
    GpuSpec("A100", bf16_tflops=312.0, memory_gb=40, intra_node_link="nvlink", intra_node_gbps=300, memory_bandwidth_gbps=1555),
    GpuSpec("H100", bf16_tflops=989.0, fp8_tflops=1979.0, memory_gb=80, intra_node_link="nvlink", intra_node_gbps=450, memory_bandwidth_gbps=3350),
    GpuSpec("H200", bf16_tflops=989.0, fp8_tflops=1979.0, memory_gb=141, intra_node_link="nvlink", intra_node_gbps=450, memory_bandwidth_gbps=4800),
    GpuSpec("T4", bf16_tflops=65.0, memory_gb=16, intra_node_link="pcie", intra_node_gbps=16, memory_bandwidth_gbps=320,
            native_bf16=False),
)}


def gpu_for_device_name(device_name: str) -> GpuSpec | None:
    """The spec of a CUDA device name such as 'NVIDIA H200' or 'NVIDIA L4'; None if unknown."""
    name = device_name.upper().replace("-", " ")
    for model in sorted(GPUS, key=len, reverse=True):
        if model.upper() in name.split() or model.upper() in name:
            return GPUS[model]
    return None
