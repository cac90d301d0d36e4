"""ECR's side of the seam (tools.seams.registry), more cases on small templates: the registry's permissions policy
as a grant of the first pull's import rights."""

from __future__ import annotations

import pytest

from tests.infra.test_registry_cases import HERE, _template_pulling
from tools.seams import registry
from tools.seams.cfn import Resolver
from tools.seams.iam import evaluate

CACHED = f"{HERE}/ecr-public/cloudwatch-agent/cloudwatch-agent:1.3"


def _with_registry_policy(principal) -> Resolver:
    t = _template_pulling(CACHED)
    t["Resources"]["RegistryPolicy"] = {"Type": "AWS::ECR::RegistryPolicy", "Properties": {"PolicyText": {
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": principal},
            "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
            "Resource": "arn:aws:ecr:us-east-2:111122223333:repository/ecr-public/*"}]}}}
    return Resolver(t)


@pytest.mark.parametrize(("principal", "allowed"), [
    # IAM policy evaluation: a resource-based policy allows only the principals it names; naming their account
    # delegates to the role's identity policies, which grant nothing here
    ({"Fn::GetAtt": ["NodeRole", "Arn"]}, True), ("arn:aws:iam::111122223333:root", False),
    ("arn:aws:iam::111122223333:role/other", False), ("arn:aws:iam::444455556666:root", False),
])
def test_the_registry_policy_grants_the_import_only_to_the_principals_it_names(principal, allowed):
    calls = registry.import_calls(_with_registry_policy(principal))
    assert len(calls) == 2
    assert [evaluate(list(c.policies), c.request).allowed for c in calls] == [allowed, allowed]
