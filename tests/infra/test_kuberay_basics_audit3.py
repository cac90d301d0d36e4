"""cdk_constructs.kuberay_basics.autoscaling: KubeRay reads enableInTreeAutoscaling as a *bool (raycluster_types.go),
true only when set to the boolean true; a string is no boolean (the CRD's schema refuses it before KubeRay sees it)."""

from __future__ import annotations

import pytest

from cdk_constructs.kuberay_basics import autoscaling


@pytest.mark.parametrize("spec, on", [
    ({"enableInTreeAutoscaling": True}, True), ({"enableInTreeAutoscaling": False}, False),
    ({"enableInTreeAutoscaling": None}, False), ({}, False), ({"enableInTreeAutoscaling": "true"}, False),
    ({"enableInTreeAutoscaling": 1}, False),
])
def test_in_tree_autoscaling_is_on_only_for_the_boolean_true(spec, on):
    assert autoscaling(spec) is on
