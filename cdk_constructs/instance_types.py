"""Instance types as the infrastructure uses them: EFA interfaces, pod resources, vCPU quotas.

The table itself (GPUs, vCPUs, memory, network, EFA interfaces, prices) is planning/hardware.py,
shared with the planner, which plans the sharding layouts from the same figures.
"""

from __future__ import annotations

from planning.hardware import INSTANCE_TYPES, PRICES_AS_OF, InstanceSpec

__all__ = ["INSTANCE_TYPES", "PRICES_AS_OF", "InstanceSpec", "EKS_CONTROL_PLANE_USD_PER_HOUR", "NAT_GATEWAY_USD_PER_HOUR",
           "INTERFACE_ENDPOINT_USD_PER_AZ_HOUR", "CAPACITY_TYPES", "PRICE_METADATA"]

# How a node group's instances are bought: by EC2 usage class (DescribeInstanceTypes SupportedUsageClasses, the
# settings' gpu_capacity_type), and the AWS::EKS::Nodegroup CapacityType EKS takes for each.
CAPACITY_TYPES = {"on-demand": "ON_DEMAND", "spot": "SPOT", "capacity-block": "CAPACITY_BLOCK"}
# The node group's resource metadata key holding a GPU node's hourly price and its basis (tools/review.py).
PRICE_METADATA = "eks-fsdp-efa:price"

# Hourly prices of the pieces that are not instances.
NAT_GATEWAY_USD_PER_HOUR = 0.045
EKS_CONTROL_PLANE_USD_PER_HOUR = 0.10
INTERFACE_ENDPOINT_USD_PER_AZ_HOUR = 0.01
"""An interface VPC endpoint, per AZ it is in, per hour (AWS PrivateLink pricing, us-east-2)."""

# On-Demand vCPU quota codes by instance family letter ("Running On-Demand ... instances").
VCPU_QUOTA_CODES = {"g": "L-DB2E81BA", "p": "L-417A185B", "standard": "L-1216C47A"}
# Spot vCPU quota codes by the same classes ("All G and VT Spot Instance Requests", "All P ...", "All Standard ...").
SPOT_VCPU_QUOTA_CODES = {"g": "L-3819A6DF", "p": "L-7212CCBC", "standard": "L-34B43A08"}


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

    EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with multiple network
    cards": the primary interface is card 0, device 0 (ENA, or "efa": EFA with ENA); each further
    EFA-only interface takes the next unused card at device index 0 (older examples used 1).
    The node group names the subnet, so no interface carries one. Only card 0 gets an IP
    address that pods use; the efa-only cards carry RDMA traffic alone.
    """
    interfaces = []
    for card in range(spec.efa_interfaces):
        interfaces.append(
            {
                "DeviceIndex": 0,
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
