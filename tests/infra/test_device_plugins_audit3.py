"""cdk_constructs/device_plugins.py: the plugins' DaemonSets tolerate the GPU taint exactly when the nodes carry it."""

from __future__ import annotations

import pytest

from cdk_constructs.device_plugins import efa_values, nvidia_values

# The taint of a tainted GPU node group (AWS::EKS::Nodegroup Taints) and the toleration that matches it: Kubernetes
# "Taints and Tolerations": operator Equal matches when key, value and effect are all the taint's.
MATCHING_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize("tainted, tolerations", [(True, [MATCHING_TOLERATION]), (False, [])])
@pytest.mark.parametrize("values", [nvidia_values, lambda tainted: efa_values("g6.12xlarge", tainted)],
                         ids=["nvidia", "efa"])
def test_each_plugin_tolerates_the_gpu_taint_only_on_tainted_nodes(values, tainted, tolerations):
    assert values(tainted)["tolerations"] == tolerations


@pytest.mark.parametrize("values", [nvidia_values, lambda tainted: efa_values("g6.12xlarge", tainted)],
                         ids=["nvidia", "efa"])
def test_each_plugin_runs_on_gpu_nodes_only(values):
    # The GPU node group's label (cdk_constructs/node_groups.py GPU_NODE_LABELS); system nodes lack it.
    assert values(False)["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
