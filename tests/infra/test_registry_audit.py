"""ECR's side of the seam (tools.seams.registry): a rule's prefix written with its trailing slash."""

from __future__ import annotations

import pytest

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
