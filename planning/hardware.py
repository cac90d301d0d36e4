"""The instance types this project knows, from AWS's instance specifications and list prices.

One table serves the infrastructure (launch templates, pod requests, cost, preflight) and the planner
(the links a sharding layout crosses, for `--sharding auto` and `python -m planning.plan`); each GPU's
datasheet figures are training/gpus.py's. What was measured instead lives in planning/calibration.py,
with the run it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from training.gpus import GPUS, GpuSpec

GIB = 2**30


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
