"""The API server's limits (tools.seams.kube) where characters and bytes differ."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_kube import _ray_job, config_map, manifest_resource
from tools.seams.cfn import Resolver
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


def _job_with_sidecar_first(wait: str) -> dict:
    """The worker's hook on its second container: a sidecar ahead of it in the list."""
    job = _ray_job(30, wait)
    pod = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    pod["containers"].insert(0, {"name": "log-shipper"})
    return job


@pytest.mark.parametrize("wait, refused", [("29", False), ("30", True)])
def test_every_containers_prestop_hook_is_held_to_the_grace_period(wait, refused):
    # The kubelet runs each container's preStop hook within the pod's one grace period (killContainer).
    assert bool(kube.hook_problems(_job_with_sidecar_first(wait))) is refused


def test_the_template_check_holds_a_rayjobs_hooks_to_their_grace_period():
    t = {"Resources": {"Job": manifest_resource([_ray_job(30, "30")])}}
    [problem] = kube.problems(Resolver(t, "us-east-2"))
    assert "the preStop hook waits 30 s" in problem and problem.endswith("(Job)")
