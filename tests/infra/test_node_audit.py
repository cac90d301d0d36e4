"""What a container on a node will see (tools.seams.node): a LimitMEMLOCK= size as systemd's parse_size reads it."""

from __future__ import annotations

import math

import pytest

from tests.infra.test_seams_node import nodegroup_template
from tools.seams import node
from tools.seams.cfn import Resolver


@pytest.mark.parametrize("text, value", [
    # systemd src/basic/parse-util.c parse_size: each term's unit must come after the previous term's in the table
    # E P T G M K B (start_pos = i + 1): larger first, each at most once; otherwise -EINVAL and the line is ignored.
    ("1G 512M", 3 << 29), ("1G 512K", (1 << 30) + (512 << 10)),
    ("512M 1G", None), ("1M 1M", None), ("1K 1M", None),
])
def test_a_sums_units_go_larger_first_each_once(text, value):
    assert node._memlock_value(text) == value


def test_user_data_that_declares_multipart_but_has_no_part_is_malformed_mime():
    # A Content-Type multipart/mixed body without its start boundary: Python's email parser (cloud-init's) records
    # the defect and reads no part, so cloud-init would run nothing of it.
    user_data = 'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n#!/bin/bash\necho hi\n'
    found = node.problems(Resolver(nodegroup_template(user_data), "us-east-2"))
    assert any("malformed MIME (StartBoundaryNotFoundDefect" in p for p in found)


@pytest.mark.parametrize("section, memlock", [("[Service]", math.inf), ("[service]", None)])
def test_limit_memlock_counts_only_in_the_service_section_spelled_exactly(section, memlock):
    # systemd.syntax(7): section names are case-sensitive and written as they are; LimitMEMLOCK= elsewhere is ignored.
    assert node._limit_memlock(f"{section}\nLimitMEMLOCK=infinity\n") == memlock
