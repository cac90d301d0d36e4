"""The API server's limits (tools.seams.kube), more cases: names checked whole, and binaryData's keys held to the
same rule as data's."""

from __future__ import annotations

import base64

import pytest

from tools.seams import kube


@pytest.mark.parametrize(("kind", "name", "ok"), [
    # apimachinery IsDNS1123Subdomain: lower-case alphanumerics, '-' and '.', starting and ENDING with an
    # alphanumeric, checked over the whole name
    ("ConfigMap", "trainer", True), ("ConfigMap", "trainer.v1", True), ("ConfigMap", "trainer-", False),
    ("ConfigMap", "trainer_v1", False), ("ConfigMap", "trainer.", False), ("ConfigMap", "Trainer", False),
    # IsDNS1123Label for a Namespace or a Service: no '.' at all
    ("Service", "ray-head", True), ("Service", "ray.head", False), ("Service", "ray-head-", False),
])
def test_a_name_is_checked_to_its_last_character(kind, name, ok):
    assert (kube.name_problems(kind, name) == []) is ok


@pytest.mark.parametrize(("key", "ok"), [("trainer.zip", True), ("trainer/zip", False), ("trainer zip", False)])
def test_a_binary_data_key_is_held_to_the_config_map_key_rule(key, ok):
    # ValidateConfigMap checks every key of data and of binaryData with IsConfigMapKey ([-._a-zA-Z0-9]+).
    obj = {"kind": "ConfigMap", "metadata": {"name": "trainer"},
           "binaryData": {key: base64.b64encode(b"zip").decode()}}
    assert (not any("data key" in p for p in kube.object_problems(obj, applied=False))) is ok
