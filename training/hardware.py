"""What the hardware offers: GPUs and the instance types this project knows, from published figures.

One table serves the infrastructure (launch templates, pod requests, cost, preflight) and the trainer
(peak FLOP/s for MFU, and the links its sharding layouts cross, for `--sharding auto` and
`python -m training.plan`). Every figure is a vendor's datasheet or AWS's instance specification;
what was measured instead lives in training/plan.py's calibration, with the run it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
GB = 1e9


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


# NVIDIA datasheets (memory bandwidth: A100 40 GB SXM, H100 SXM; FP8: the dense figure, half the sparsity one
# the datasheets print: L4 485, L40S 1,466, H100/H200 SXM 3,958 TFLOP/s with sparsity). PCIe Gen4 x16: 32 GB/s each way;
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

PRICES_AS_OF = "2025-06 on-demand list prices, us-east-1/us-east-2"


@dataclass(frozen=True)
class InstanceSpec:
    """What one EC2 instance type offers (AWS's instance type specifications)."""

    name: str
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gib: int = 0
    network_cards: int = 1
    efa_interfaces: int = 0
    network_gbit: float = 0.0
    """The instance's network bandwidth, Gbit/s: what every byte between two nodes shares."""
    usd_per_hour: float = 0.0
    """On-demand list price (PRICES_AS_OF); feeds estimates only."""

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def supports_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def gpu(self) -> GpuSpec | None:
        return GPUS.get(self.gpu_model)

    @property
    def network_gbps(self) -> float:
        """Network bandwidth in GB/s, one direction."""
        return self.network_gbit / 8


INSTANCE_TYPES: dict[str, InstanceSpec] = {
    spec.name: spec
    for spec in (
        # System nodes (no GPU, no EFA).
        InstanceSpec("m7i.xlarge", vcpus=4, memory_gib=16, network_gbit=12.5, usd_per_hour=0.2016),
        InstanceSpec("m7i.2xlarge", vcpus=8, memory_gib=32, network_gbit=12.5, usd_per_hour=0.4032),
        InstanceSpec("m6i.xlarge", vcpus=4, memory_gib=16, network_gbit=12.5, usd_per_hour=0.192),
        # GPU nodes.
        InstanceSpec("g6.12xlarge", vcpus=48, memory_gib=192, gpus=4, gpu_model="L4", gpu_memory_gib=24,
                     network_cards=1, efa_interfaces=1, network_gbit=40, usd_per_hour=4.6016),
        InstanceSpec("g6.48xlarge", vcpus=192, memory_gib=768, gpus=8, gpu_model="L4", gpu_memory_gib=24,
                     network_cards=1, efa_interfaces=1, network_gbit=100, usd_per_hour=13.3504),
        InstanceSpec("g6e.12xlarge", vcpus=48, memory_gib=384, gpus=4, gpu_model="L40S", gpu_memory_gib=48,
                     network_cards=1, efa_interfaces=1, network_gbit=100, usd_per_hour=10.4926),
        InstanceSpec("g5.48xlarge", vcpus=192, memory_gib=768, gpus=8, gpu_model="A10G", gpu_memory_gib=24,
                     network_cards=1, efa_interfaces=1, network_gbit=100, usd_per_hour=16.288),
        InstanceSpec("p4d.24xlarge", vcpus=96, memory_gib=1152, gpus=8, gpu_model="A100", gpu_memory_gib=40,
                     network_cards=4, efa_interfaces=4, network_gbit=400, usd_per_hour=21.9576),
        InstanceSpec("p5.48xlarge", vcpus=192, memory_gib=2048, gpus=8, gpu_model="H100", gpu_memory_gib=80,
                     network_cards=32, efa_interfaces=32, network_gbit=3200, usd_per_hour=55.04),
        # A GPU type without EFA, known so that choosing it gets a precise refusal.
        InstanceSpec("g4dn.xlarge", vcpus=4, memory_gib=16, gpus=1, gpu_model="T4", gpu_memory_gib=16,
                     network_cards=1, efa_interfaces=0, network_gbit=25, usd_per_hour=0.526),
    )
}


def gpu_for_device_name(device_name: str) -> GpuSpec | None:
    """The spec of a CUDA device name such as 'NVIDIA H200' or 'NVIDIA L4'; None if unknown."""
    name = device_name.upper().replace("-", " ")
    for model in sorted(GPUS, key=len, reverse=True):
        if model.upper() in name.split() or model.upper() in name:
            return GPUS[model]
    return None
