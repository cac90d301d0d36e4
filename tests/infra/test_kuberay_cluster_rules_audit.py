"""cdk_constructs/kuberay_cluster_rules.py against KubeRay v1.7's validation.go: a pointer field counts when set, an
empty object included."""

from __future__ import annotations

import pytest

from tests.infra.test_kuberay_cluster_rules_more import rules, spec

CONFLICT = ("ValidateRayClusterSpec", "ray.io/ft-enabled annotation and gcsFaultToleranceOptions are both set")


@pytest.mark.parametrize("options, refused", [({}, True), ({"redisAddress": "redis:6379"}, True), (None, False)])
def test_the_ft_annotation_conflicts_with_fault_tolerance_options_even_empty(options, refused):
    # validation.go: `annotations[RayFTEnabledAnnotationKey] != "" && spec.GcsFaultToleranceOptions != nil`: an empty
    # gcsFaultToleranceOptions is a non-nil pointer.
    cluster = spec() if options is None else spec(gcsFaultToleranceOptions=options)
    assert (CONFLICT in rules(cluster, {"ray.io/ft-enabled": "true"})) is refused
