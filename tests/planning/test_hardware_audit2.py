"""planning.hardware's table against AWS's published instance type specifications, and the properties read from it."""

from __future__ import annotations

import pytest

from planning.hardware import INSTANCE_TYPES


# AWS's accelerated computing instance specifications: vCPUs, memory GiB, GPUs, GPU, network Gbit/s, network cards,
# EFA interfaces.
@pytest.mark.parametrize("name,vcpus,memory_gib,gpus,gpu,network_gbit,cards,efa", [
    ("g6.12xlarge", 48, 192, 4, "L4", 40, 1, 1),
    ("g6.48xlarge", 192, 768, 8, "L4", 100, 1, 1),
    ("g6e.12xlarge", 48, 384, 4, "L40S", 100, 1, 1),
    ("g5.48xlarge", 192, 768, 8, "A10G", 100, 1, 1),
    ("p4d.24xlarge", 96, 1152, 8, "A100", 400, 4, 4),
    ("p5.48xlarge", 192, 2048, 8, "H100", 3200, 32, 32),
    ("g4dn.xlarge", 4, 16, 1, "T4", 25, 1, 0),
])
def test_each_gpu_type_is_its_published_specification(name, vcpus, memory_gib, gpus, gpu, network_gbit, cards, efa):
    spec = INSTANCE_TYPES[name]
    assert (spec.vcpus, spec.memory_gib, spec.gpus, spec.gpu_model, spec.network_gbit, spec.network_cards,
            spec.efa_interfaces) == (vcpus, memory_gib, gpus, gpu, network_gbit, cards, efa)


@pytest.mark.parametrize("name,family", [("g6.12xlarge", "g6"), ("g6e.12xlarge", "g6e"), ("p5.48xlarge", "p5"),
                                         ("m7i.xlarge", "m7i")])
def test_the_family_is_the_name_before_the_dot(name, family):
    assert INSTANCE_TYPES[name].family == family


@pytest.mark.parametrize("name,efa", [("g6.12xlarge", True), ("p5.48xlarge", True), ("g4dn.xlarge", False),
                                      ("m7i.xlarge", False)])
def test_efa_is_supported_only_with_an_efa_interface(name, efa):
    assert INSTANCE_TYPES[name].supports_efa is efa


@pytest.mark.parametrize("name,gbytes", [("g6.12xlarge", 5.0), ("p4d.24xlarge", 50.0), ("p5.48xlarge", 400.0)])
def test_network_bandwidth_in_gigabytes_is_the_gigabits_over_eight(name, gbytes):
    assert INSTANCE_TYPES[name].network_gbps == gbytes


def test_a_gpu_type_finds_its_gpus_datasheet_and_a_system_type_none():
    assert INSTANCE_TYPES["g6.12xlarge"].gpu.name == "L4" and INSTANCE_TYPES["m7i.xlarge"].gpu is None
