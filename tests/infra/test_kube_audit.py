"""The API server's limits (tools.seams.kube) where characters and bytes differ."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_kube import config_map
from tools.seams import kube


@pytest.mark.parametrize("characters, refused", [(349_525, False), (349_526, True)])
def test_a_config_maps_data_counts_utf8_bytes_not_characters(characters, refused):
    # ValidateConfigMap sums len(value) of Go strings: bytes. '€' is 3 bytes in UTF-8: 349,525 of them and an 'x'
    # are exactly 1 MiB (accepted), one more is 3 bytes over; counted as characters, both would pass.
    data = {"a": "€" * characters, "b": "x"}
    size = 3 * characters + 1
    assert kube.data_size(config_map(data)) == size
    assert any("data totals" in p for p in kube.object_problems(config_map(data), applied=False)) is refused


@pytest.mark.parametrize("value, refused", [("1", False), (1, True), (True, True)])
def test_a_label_value_that_is_not_a_string_is_refused(value, refused):
    # ObjectMeta.Labels is map[string]string: the API server cannot decode a number or a boolean there (a YAML
    # `version: 1` left unquoted).
    obj = {"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"version": value}}}
    assert any("is not a string" in p for p in kube.object_problems(obj, applied=False)) is refused
