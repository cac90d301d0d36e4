"""ECR's side of the seam (tools.seams.registry): a rule's prefix written with its trailing slash."""

from __future__ import annotations

import json

import pytest

from cdk_constructs.annotations import IMAGE_SOURCE_ANNOTATION
from tests.infra.test_registry_cases import HERE, _template_pulling
from tools.seams import registry
from tools.seams.cfn import Resolver


@pytest.mark.parametrize("prefix", ["ecr-public", "ecr-public/"])
def test_a_prefix_with_or_without_its_trailing_slash_serves_the_same_repositories(prefix):
    # CreatePullThroughCacheRule: "There is always an assumed / applied to the end of the prefix"; the API's pattern
    # allows one written out too, and "ecr-public/" then names the same folder as "ecr-public".
    t = _template_pulling(f"{HERE}/ecr-public/dlc/ray:v1")
    t["Resources"]["Rule"]["Properties"]["EcrRepositoryPrefix"] = prefix
    assert registry.problems(Resolver(t, "us-east-2")) == []


@pytest.mark.parametrize("source, refused", [
    ("public.ecr.aws/dlc/ray:v1", False),
    # "Pulling an image with a pull through cache rule": <prefix>/<path>:<tag> is exactly <upstream>/<path>:<tag>; a
    # source whose tag merely starts with the pulled one is another image
    ("public.ecr.aws/dlc/ray:v1.1", True),
])
def test_a_pull_stands_for_exactly_its_source_image(source, refused):
    job = {"kind": "RayJob", "metadata": {"name": "job", "annotations": {IMAGE_SOURCE_ANNOTATION: source}},
           "spec": {"image": f"{HERE}/ecr-public/dlc/ray:v1"}}
    t = _template_pulling()
    t["Resources"]["Job"] = {"Type": "Custom::AWSCDK-EKS-KubernetesResource",
                             "Properties": {"Manifest": json.dumps([job])}}
    assert bool(registry.problems(Resolver(t, "us-east-2"))) is refused
