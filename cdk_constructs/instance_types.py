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

# vCPU quotas (Service Quotas, service ec2) by quota class: (code, name), as the Amazon EC2 documentation's
# "Amazon EC2 instance type quotas" tables name them. On-Demand: all P families share one quota.
VCPU_QUOTAS = {"g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
               "p": ("L-417A185B", "Running On-Demand P instances"),
               "standard": ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")}
# Spot splits P: P2, P3 and P4 share one quota, P5 (p5, p5e, p5en) has its own. The codes are those of the same
# table's console links; P6 is in neither name, so its quota is not known here (None: preflight says so).
SPOT_VCPU_QUOTAS = {"g": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
                    "p2-p4": ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
                    "p5": ("L-C4BD4855", "All P5 Spot Instance Requests"),
                    "standard": ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests")}


def vcpu_quota_class(instance_type: str, spot: bool = False) -> str | None:
    """Which vCPU quota an instance type counts against: a VCPU_QUOTAS key, or for spot a SPOT_VCPU_QUOTAS one.

    G and VT share one quota, P has its own (for spot, P2-P4 one and P5 another), and A, C, D, H, I, M, R, T, Z
    share the standard one; Inf, Trn, DL, F, X and HPC have quotas of their own that this project does not use
    (None), and so has a spot P family the table does not name.
    """
    family = instance_type.split(".")[0].lower()
    if family.startswith(("inf", "trn", "dl", "hpc")):
        return None
    if family.startswith(("g", "vt")):
        return "g"
    if family.startswith("p"):
        if not spot:
            return "p"
        generation = family[1:2]
        return "p5" if generation == "5" else "p2-p4" if generation in ("2", "3", "4") else None
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
