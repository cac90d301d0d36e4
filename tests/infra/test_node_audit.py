"""What a container on a node will see (tools.seams.node): a LimitMEMLOCK= size as systemd's parse_size reads it."""

from __future__ import annotations

import pytest

from tools.seams import node


@pytest.mark.parametrize("text, value", [
    # systemd src/basic/parse-util.c parse_size: each term's unit must come after the previous term's in the table
    # E P T G M K B (start_pos = i + 1): larger first, each at most once; otherwise -EINVAL and the line is ignored.
    ("1G 512M", 3 << 29), ("1G 512K", (1 << 30) + (512 << 10)),
    ("512M 1G", None), ("1M 1M", None), ("1K 1M", None),
])
def test_a_sums_units_go_larger_first_each_once(text, value):
    assert node._memlock_value(text) == value
