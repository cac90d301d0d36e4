"""The IAM evaluator (tools.seams.iam), more cases: the case rules of the string and ARN condition operators, and
what an ARN condition compares."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_iam import allowed, identity

CLUSTER = "arn:aws:eks:us-east-2:111122223333:cluster/demo"


def condition(operator: str, key: str, value) -> list:
    return [identity({"Effect": "Allow", "Action": "sts:TagSession", "Resource": "*",
                      "Condition": {operator: {key: value}}})]


@pytest.mark.parametrize(("operator", "pattern", "actual", "holds"), [
    # IAM User Guide, "Condition operators": StringLike is case-sensitive, with * and ? wildcards
    ("StringLike", "gpu-*", "gpu-worker", True), ("StringLike", "gpu-*", "GPU-worker", False),
    ("StringLike", "gpu-?", "gpu-a", True), ("StringLike", "gpu-?", "gpu-ab", False),
    ("StringNotLike", "gpu-*", "GPU-worker", True), ("StringNotLike", "gpu-*", "gpu-worker", False),
])
def test_string_like_is_case_sensitive(operator, pattern, actual, holds):
    assert allowed(condition(operator, "aws:RequestTag/role", pattern), "sts:TagSession",
                   context={"aws:RequestTag/role": actual}) is holds


@pytest.mark.parametrize(("pattern", "actual", "holds"), [
    # ARN condition operators compare the six colon-separated parts, each with wildcards: a value of fewer parts
    # is no ARN the pattern names, though its parts begin the pattern's
    ("arn:aws:eks:*:*:*", CLUSTER, True), ("arn:aws:eks:*:*:*", "arn:aws:eks", False),
    ("arn:aws:eks:*:111122223333:cluster/*", CLUSTER, True),
    ("arn:aws:eks:*:444455556666:cluster/*", CLUSTER, False),
    ("arn:aws:eks:*:111122223333:cluster/DEMO", CLUSTER, False),  # ARNs compare case-sensitively
])
def test_arn_like_compares_all_six_parts(pattern, actual, holds):
    assert allowed(condition("ArnLike", "aws:SourceArn", pattern), "sts:TagSession",
                   context={"aws:SourceArn": actual}) is holds
