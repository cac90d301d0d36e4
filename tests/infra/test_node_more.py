"""What a container on a node will see (tools.seams.node), more rules of systemd's drop-in reading, each held
with rows on both sides."""

from __future__ import annotations

import math

import pytest

from tests.infra.test_node_cases import drop_in, memlock_of
from tests.infra.test_seams_node import hugepages_pod, mime, nodegroup_template
from tools.seams import node
from tools.seams.cfn import Resolver

EIGHT_MIB = 8 << 20
FOLDERS = ["/etc/systemd/system/containerd.service.d", "/run/systemd/system/containerd.service.d"]


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize(("name", "memlock"), [
    ("10-efa.conf", math.inf),
    # systemd.unit(5): only files with the .conf suffix of a .d/ folder are drop-ins; the others are ignored
    ("10-efa.cfg", EIGHT_MIB), ("10-efa.conf.bak", EIGHT_MIB), ("10-efa", EIGHT_MIB),
])
def test_only_a_conf_file_is_a_drop_in(folder, name, memlock):
    assert memlock_of(drop_in(name, "[Service]\\nLimitMEMLOCK=infinity\\n", folder)) == memlock


@pytest.mark.parametrize(("limit", "memlock"), [
    # systemd's rlimit_parse (src/basic/rlimit-util.c): only "infinity" is unlimited; a size is parse_size's, base
    # 1024 with the suffixes B K M G T P E (upper case), fractions and sums ("1G 512M"); soft:hard sets the soft one.
    ("infinity", math.inf), ("infinity:infinity", math.inf), ("8M:infinity", EIGHT_MIB),
    ("1T", 1 << 40), ("1.5G", 3 << 29), ("1G 512M", 3 << 29), ("4096B", 4096),
])
def test_a_limit_is_read_as_systemd_parses_it(limit, memlock):
    assert memlock_of(drop_in("90-memlock.conf", f"[Service]\\nLimitMEMLOCK={limit}\\n")) == memlock


@pytest.mark.parametrize("limit", [
    # config_parse_rlimit (src/shared/conf-parser.c) logs "Failed to parse resource value, ignoring" or "Soft
    # resource limit chosen higher than hard limit, ignoring" and keeps what was set before: ulimit's "unlimited"
    # and -1 are no systemd values, nor a lower-case unit, and a soft limit above its hard one is refused
    "unlimited", "-1", "8m", "lots", "", "infinity:8M", "1:2:3",
])
def test_a_limit_systemd_cannot_parse_is_ignored(limit):
    # an earlier drop-in's 64M stays: the refused line changes nothing
    script = (drop_in("10-memlock.conf", "[Service]\\nLimitMEMLOCK=64M\\n")
              + drop_in("90-memlock.conf", f"[Service]\\nLimitMEMLOCK={limit}\\n"))
    assert memlock_of(script) == 64 << 20


def test_within_a_drop_in_an_unparsable_last_assignment_keeps_the_one_before():
    assert memlock_of(drop_in("90-memlock.conf", "[Service]\\nLimitMEMLOCK=infinity\\nLimitMEMLOCK=unlimited\\n")) \
        == math.inf


def hugepage_problems(pages: int, *amounts: str) -> list[str]:
    """The node seam's verdict on one pod whose containers ask `amounts` of hugepages-2Mi, on a group that reserves
    `pages` 2 MiB pages."""
    t = nodegroup_template(mime(("text/x-shellscript", f"#!/bin/bash\nsysctl -w vm.nr_hugepages={pages}\n")), efa=False)
    t["Resources"]["Gpu"]["Properties"]["Labels"] = {"role": "gpu-worker"}
    pod = hugepages_pod(amounts[0])
    pod["spec"]["containers"] += [{"resources": {"limits": {"hugepages-2Mi": a}}} for a in amounts[1:]]
    return node.problems(Resolver(t, "us-east-2"), [pod])


@pytest.mark.parametrize(("amount", "fits"), [
    # Kubernetes quantities: G is 10**9 bytes, Gi 2**30. 477 pages are 1,000,341,504 bytes: 1G fits, 1Gi does not.
    ("1G", True), ("1Gi", False), ("1000M", True), ("954Mi", True), ("955Mi", False), ("1000341504", True),
    ("1000341505", False),
])
def test_a_hugepages_request_is_read_in_kubernetes_units(amount, fits):
    assert (hugepage_problems(477, amount) == []) is fits


def test_a_pods_hugepages_are_the_sum_of_its_containers():
    # The scheduler adds up the containers' requests: two of 512Mi need 1 GiB, more than 256 pages (512 MiB).
    [problem] = hugepage_problems(256, "512Mi", "512Mi")
    assert "asks 1024 MiB of hugepages-2Mi, the node reserves 512 MiB" in problem


def test_user_data_that_is_not_base64_is_read_as_it_is():
    # A template whose user data keeps unresolved placeholders is not valid base64: its text is still the user data,
    # judged like the encoded one (here its drop-in makes memlock unlimited), not taken for no user data.
    view = node.node_view(mime(("text/x-shellscript", "#!/bin/bash\n" + drop_in("90-memlock.conf",
                                                                                "[Service]\\nLimitMEMLOCK=infinity\\n"))))
    assert (view.has_user_data, view.multipart, view.memlock) == (True, True, math.inf)


@pytest.mark.parametrize("reference", [
    {"Id": {"Ref": "Template"}},
    # EKS API LaunchTemplateSpecification: a launch template is named by its id or by its name
    {"Name": "gpu-nodes"},
])
def test_a_group_naming_its_launch_template_by_id_or_by_name_is_judged_on_it(reference):
    t = nodegroup_template(None)  # an EFA template without the drop-in: refused when it is read
    t["Resources"]["Template"]["Properties"]["LaunchTemplateName"] = "gpu-nodes"
    t["Resources"]["Gpu"]["Properties"]["LaunchTemplate"] = {**reference, "Version": "1"}
    assert node.launch_template_of(Resolver(t, "us-east-2"), "Gpu")[0] == "Template"
    [problem] = node.problems(Resolver(t, "us-east-2"))
    assert problem.startswith("node: Gpu: EFA pods need an unlimited memlock")


def test_a_name_no_template_of_the_stack_holds_names_none():
    t = nodegroup_template(None)
    t["Resources"]["Template"]["Properties"]["LaunchTemplateName"] = "gpu-nodes"
    t["Resources"]["Gpu"]["Properties"]["LaunchTemplate"] = {"Name": "other", "Version": "1"}
    assert node.launch_template_of(Resolver(t, "us-east-2"), "Gpu") is None
