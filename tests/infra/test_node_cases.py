"""What a container on a node will see (tools.seams.node), case by case: each reading rule of systemd, sysctl and
the pod templates held with rows on both sides."""

from __future__ import annotations

import math

import pytest

from tests.infra.test_seams_node import b64, hugepages_pod, mime, nodegroup_template
from tools.seams import node
from tools.seams.cfn import Resolver

DROP_IN_DIR = "/etc/systemd/system/containerd.service.d"


def memlock_of(script_body: str) -> float:
    return node.node_view(b64(mime(("text/x-shellscript", "#!/bin/bash\n" + script_body)))).memlock


def drop_in(name: str, text: str, folder: str = DROP_IN_DIR) -> str:
    return f"mkdir -p {folder}\nprintf '{text}' > {folder}/{name}\n"


@pytest.mark.parametrize("limit, size", [("8K", 8 << 10), ("64M", 64 << 20), ("1G", 1 << 30), ("65536", 65536)])
def test_a_drop_in_limit_is_read_in_bytes_with_base_1024_units(limit, size):
    # systemd.exec(5), process properties: sizes in bytes, "with the usual suffixes K, M, G ... to the base 1024".
    assert memlock_of(drop_in("90-memlock.conf", f"[Service]\\nLimitMEMLOCK={limit}\\n")) == size


def test_of_two_assignments_in_one_drop_in_the_last_wins():
    # systemd.exec(5): a setting assigned twice takes the later value.
    assert memlock_of(drop_in("90-memlock.conf", "[Service]\\nLimitMEMLOCK=infinity\\nLimitMEMLOCK=8M\\n")) == 8 << 20


def test_a_later_drop_in_that_sets_no_memlock_keeps_the_earlier_value():
    # 99-other.conf changes another setting: LimitMEMLOCK keeps 90-memlock.conf's infinity (systemd.unit(5): each
    # drop-in adds its assignments; a file without LimitMEMLOCK= resets nothing).
    script = (drop_in("90-memlock.conf", "[Service]\\nLimitMEMLOCK=infinity\\n")
              + drop_in("99-other.conf", "[Service]\\nLimitNOFILE=1048576\\n"))
    assert memlock_of(script) == math.inf


@pytest.mark.parametrize("script, pages", [
    ("sysctl -w vm.nr_hugepages=512\n", 512),
    ("echo 256 > /proc/sys/vm/nr_hugepages\n", 256),
    ("sysctl -w vm.nr_hugepages=1024\nsysctl -w vm.nr_hugepages=512\n", 512),  # the last write stands
])
def test_hugepages_reserved_by_sysctl_or_proc_sys(script, pages):
    assert node.node_view(b64(mime(("text/x-shellscript", "#!/bin/bash\n" + script)))).hugepages_2mi == pages


def nodeconfig(*rlimits: str) -> str:
    lines = ["apiVersion: node.eks.aws/v1alpha1", "kind: NodeConfig", "spec:", "  containerd:", "    baseRuntimeSpec:",
             "      process:", "        rlimits:"] + [f"        - {r}" for r in rlimits]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("rlimit, memlock", [
    ("{type: RLIMIT_MEMLOCK, soft: -1, hard: -1}", math.inf),
    ("{type: RLIMIT_MEMLOCK, soft: 18446744073709551615, hard: 18446744073709551615}", math.inf),
    ("{type: RLIMIT_MEMLOCK, soft: 67108864, hard: 67108864}", 64 << 20),
])
def test_a_nodeconfig_memlock_rlimit(rlimit, memlock):
    # The OCI runtime spec's rlimits: RLIM_INFINITY is 2**64-1 (-1 as a signed value) for unlimited.
    assert node.node_view(b64(mime(("application/node.eks.aws", nodeconfig(rlimit))))).memlock == memlock


def test_a_nodeconfig_nofile_rlimit_is_soft_then_hard():
    view = node.node_view(b64(mime(("application/node.eks.aws",
                                    nodeconfig("{type: RLIMIT_NOFILE, soft: 65536, hard: 1048576}")))))
    assert view.nofile == (65536, 1048576)


def rayjob(worker_groups: int = 1, submitter: bool = False) -> dict:
    def pod(name: str) -> dict:
        return {"template": {"spec": {"containers": [{"name": name}]}}}
    spec = {"rayClusterSpec": {"headGroupSpec": pod("head"),
                               "workerGroupSpecs": [pod(f"worker{i}") for i in range(worker_groups)]}}
    if submitter:
        spec["submitterPodTemplate"] = pod("submitter")["template"]
    return {"kind": "RayJob", "spec": spec}


def test_every_pod_template_of_a_rayjob_is_a_pod_spec():
    # KubeRay makes pods from the head group, every worker group and the submitter template.
    names = [s["containers"][0]["name"] for s in node.pod_specs([rayjob(worker_groups=2, submitter=True)])]
    assert names == ["head", "worker0", "worker1", "submitter"]


def hugepages_group(labels: dict) -> dict:
    t = nodegroup_template(None, efa=False)
    t["Resources"]["Gpu"]["Properties"]["Labels"] = labels
    return t


@pytest.mark.parametrize("labels, judged", [
    ({"role": "gpu-worker"}, True), ({"role": "gpu-worker", "zone": "a"}, True),
    ({"role": "system"}, False), ({}, False)])
def test_a_pods_hugepages_are_held_to_the_groups_its_node_selector_picks(labels, judged):
    # Kubernetes nodeSelector: a pod runs only on a node holding every label of its selector.
    assert bool(node.problems(Resolver(hugepages_group(labels), "us-east-2"), [hugepages_pod("1Gi")])) is judged


def test_a_selector_of_two_labels_needs_both():
    pod = hugepages_pod("1Gi")
    pod["spec"]["nodeSelector"] = {"role": "gpu-worker", "zone": "b"}
    assert node.problems(Resolver(hugepages_group({"role": "gpu-worker", "zone": "a"}), "us-east-2"), [pod]) == []


def test_a_nodeconfig_memlock_with_a_lower_soft_limit_gives_containers_the_soft_one():
    """The kernel holds a process to its soft RLIMIT_MEMLOCK (rlim_cur) when it pins memory (ib_umem_get reads
    rlimit(RLIMIT_MEMLOCK)): soft 8 MiB under an unlimited hard limit leaves an EFA pod 8 MiB, as a drop-in's
    LimitMEMLOCK=8M:infinity does."""
    config = nodeconfig("{type: RLIMIT_MEMLOCK, soft: 8388608, hard: -1}")
    assert node.node_view(b64(mime(("application/node.eks.aws", config)))).memlock == 8 << 20
    [problem] = node.problems(Resolver(nodegroup_template(mime(("application/node.eks.aws", config))), "us-east-2"))
    assert "EFA pods need an unlimited memlock, a container gets 8 MiB" in problem


@pytest.mark.parametrize("interfaces, efa", [
    (["efa"], True), (["interface", "efa-only"], True), (["efa", "efa-only", "efa-only"], True),
    (["interface"], False), (["interface", "interface"], False)])
def test_a_group_with_any_efa_or_efa_only_interface_needs_the_unlimited_memlock(interfaces, efa):
    # EC2 launch template InterfaceType: efa (EFA with ENA) or efa-only (EFA alone) both carry RDMA, whose memory
    # registration needs an unlimited memlock; a group of plain ENA interfaces keeps the default.
    t = nodegroup_template(None)
    t["Resources"]["Template"]["Properties"]["LaunchTemplateData"]["NetworkInterfaces"] = [
        {"DeviceIndex": 0 if card == 0 else 1, "NetworkCardIndex": card, "InterfaceType": kind}
        for card, kind in enumerate(interfaces)]
    assert bool(node.problems(Resolver(t, "us-east-2"))) is efa


def test_a_pod_without_a_node_selector_is_held_to_no_group():
    # Without a nodeSelector the scheduler may place the pod on any group, one that reserves the pages included:
    # no group is the one it must run on.
    pod = hugepages_pod("1Gi")
    del pod["spec"]["nodeSelector"]
    assert node.problems(Resolver(hugepages_group({"role": "gpu-worker"}), "us-east-2"), [pod]) == []
