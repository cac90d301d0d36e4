"""Instance types this project knows, with the figures that shape nodes, pods and EFA.

One table feeds the launch template (EFA interfaces), the Ray worker pod (GPU, EFA, CPU and
memory requests), the synth-time cost estimate and the preflight checks. Figures are AWS's
published specifications; prices are on-demand list prices (USD/hour, us-east-1/us-east-2,
after the June 2025 P4/P5 price cut) and only feed an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_AS_OF = "2025-06 on-demand list prices, us-east-1/us-east-2"

# Hourly prices of the pieces that are not instances.
NAT_GATEWAY_USD_PER_HOUR = 0.045
EKS_CONTROL_PLANE_USD_PER_HOUR = 0.10


@dataclass(frozen=True)
class InstanceSpec:
    """What one EC2 instance type offers."""

    name: str
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gib: int = 0
    network_cards: int = 1
    efa_interfaces: int = 0
    usd_per_hour: float = 0.0

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def supports_efa(self) -> bool:
        return self.efa_interfaces > 0


INSTANCE_TYPES: dict[str, InstanceSpec] = {
    spec.name: spec
    for spec in (
        # System nodes (no GPU, no EFA).
        InstanceSpec("m7i.xlarge", vcpus=4, memory_gib=16, usd_per_hour=0.2016),
        InstanceSpec("m7i.2xlarge", vcpus=8, memory_gib=32, usd_per_hour=0.4032),
        InstanceSpec("m6i.xlarge", vcpus=4, memory_gib=16, usd_per_hour=0.192),
        # GPU nodes.
        InstanceSpec("g6.12xlarge", vcpus=48, memory_gib=192, gpus=4, gpu_model="L4",
                     gpu_memory_gib=24, network_cards=1, efa_interfaces=1, usd_per_hour=4.6016),
        InstanceSpec("g6.48xlarge", vcpus=192, memory_gib=768, gpus=8, gpu_model="L4",
                     gpu_memory_gib=24, network_cards=1, efa_interfaces=1, usd_per_hour=13.3504),
        InstanceSpec("g6e.12xlarge", vcpus=48, memory_gib=384, gpus=4, gpu_model="L40S",
                     gpu_memory_gib=48, network_cards=1, efa_interfaces=1, usd_per_hour=10.4926),
        InstanceSpec("g5.48xlarge", vcpus=192, memory_gib=768, gpus=8, gpu_model="A10G",
                     gpu_memory_gib=24, network_cards=1, efa_interfaces=1, usd_per_hour=16.288),
        InstanceSpec("p4d.24xlarge", vcpus=96, memory_gib=1152, gpus=8, gpu_model="A100",
                     gpu_memory_gib=40, network_cards=4, efa_interfaces=4, usd_per_hour=21.9576),
        InstanceSpec("p5.48xlarge", vcpus=192, memory_gib=2048, gpus=8, gpu_model="H100",
                     gpu_memory_gib=80, network_cards=32, efa_interfaces=32, usd_per_hour=55.04),
        # A GPU type without EFA, known so that choosing it gets a precise refusal.
        InstanceSpec("g4dn.xlarge", vcpus=4, memory_gib=16, gpus=1, gpu_model="T4",
                     gpu_memory_gib=16, network_cards=1, efa_interfaces=0, usd_per_hour=0.526),
    )
}

# On-Demand vCPU quota codes by instance family letter ("Running On-Demand ... instances").
VCPU_QUOTA_CODES = {"g": "L-DB2E81BA", "p": "L-417A185B", "standard": "L-1216C47A"}


def vcpu_quota_class(instance_type: str) -> str | None:
    """Which On-Demand vCPU quota an instance type counts against (a VCPU_QUOTA_CODES key).

    G and VT share one quota, P has its own, and A, C, D, H, I, M, R, T, Z share the standard
    one; Inf, Trn, DL, F, X and HPC have quotas of their own that this project does not use (None).
    """
    family = instance_type.split(".")[0].lower()
    if family.startswith(("inf", "trn", "dl", "hpc")):
        return None
    if family.startswith(("g", "vt")):
        return "g"
    if family.startswith("p"):
        return "p"
    return "standard" if family[:1] in set("acdhimrtz") else None


def efa_network_interfaces(spec: InstanceSpec, security_group_ids: list[str]) -> list[dict]:
    """Launch-template network interfaces: "efa" on card 0, "efa-only" on every further card.

    The node group names the subnet, so no interface carries one. Only card 0 gets an IP
    address that pods use; the efa-only cards carry RDMA traffic alone.
    """
    interfaces = []
    for card in range(spec.efa_interfaces):
        interfaces.append(
            {
                "DeviceIndex": 0 if card == 0 else 1,
                "NetworkCardIndex": card,
                "InterfaceType": "efa" if card == 0 else "efa-only",
                "Groups": list(security_group_ids),
                "DeleteOnTermination": True,
            }
        )
    return interfaces


def worker_pod_resources(spec: InstanceSpec) -> dict[str, int]:
    """CPU cores and memory GiB one Ray worker pod may take on a node of this type.

    Leaves room for the kubelet, the device-plugin DaemonSets and the VPC CNI: about one
    sixth of the cores (at least 2) and of the memory (at least 8 GiB), rounded to tens on
    large nodes. On g6.12xlarge: 40 CPU and 160 GiB, the reference deployment's figures.
    """
    cpu = spec.vcpus - max(2, spec.vcpus // 6)
    memory = spec.memory_gib - max(8, spec.memory_gib // 6)
    if cpu >= 20:
        cpu -= cpu % 10
    if memory >= 100:
        memory -= memory % 10
    return {"cpu": cpu, "memory_gib": memory}
