"""What a container on a node will see (tools.seams.node), more rules of systemd's drop-in reading, each held
with rows on both sides."""

from __future__ import annotations

import math

import pytest

from tests.infra.test_node_cases import drop_in, memlock_of

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
