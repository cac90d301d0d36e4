"""stacks/training_cluster.py: the steps a setting turns off leave nothing of theirs in the template, and the
default keeps them. The two settings' templates are those tests/infra/test_checks.py synthesizes (one cache)."""

from __future__ import annotations

import pytest

from tests.conftest import UNDER_MUTATION, resources_of, template_for
from tests.infra.test_cluster_software import manifest_of

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def _charts(template) -> list[str]:
    return sorted(r["Properties"]["Chart"] for r in resources_of(template, "Custom::AWSCDK-EKS-HelmChart").values())


@pytest.mark.parametrize("scale_to_zero, autoscalers", [(True, 1), (False, 0)])
def test_the_cluster_autoscaler_is_installed_only_when_gpu_nodes_scale_to_zero(template, scale_to_zero, autoscalers):
    tpl = template if scale_to_zero else template_for(gpu_scale_to_zero=False)
    assert _charts(tpl).count("cluster-autoscaler") == autoscalers
    # The other charts stay: only the autoscaler step is skipped.
    assert [c for c in _charts(tpl) if c != "cluster-autoscaler"] == [c for c in _charts(template)
                                                                      if c != "cluster-autoscaler"]


def test_without_the_pull_through_cache_there_is_no_cache_rule_and_pods_pull_the_image_as_given(template):
    off = template_for(image_pull_through_cache=False)
    assert resources_of(off, "AWS::ECR::PullThroughCacheRule") == {}
    [rule] = resources_of(template, "AWS::ECR::PullThroughCacheRule").values()
    assert rule["Properties"]["UpstreamRegistryUrl"] == "public.ecr.aws"
    # stacks/settings.py's default training.image, verbatim: no cache prefix in front of it.
    head = manifest_of(off, "RayJob")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["image"] == "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
