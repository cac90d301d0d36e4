"""The IAM evaluator (tools.seams.iam), case by case: each condition operator on both sides of its boundary, each
principal form of a resource-based policy."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_iam import ROLE, allowed, identity
from tools.seams.iam import Policy, Request, closest_statements


def with_condition(operator: str, value) -> list[Policy]:
    return [identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*",
                      "Condition": {operator: {"s3:max-keys": value}}})]


@pytest.mark.parametrize("operator, actual, holds", [
    # IAM User Guide, "Condition operators", numeric: each comparison on both sides of 10 and at 10 itself.
    ("NumericEquals", 10, True), ("NumericEquals", 11, False),
    ("NumericNotEquals", 10, False), ("NumericNotEquals", 11, True),
    ("NumericLessThan", 9, True), ("NumericLessThan", 10, False),
    ("NumericLessThanEquals", 10, True), ("NumericLessThanEquals", 11, False),
    ("NumericGreaterThan", 11, True), ("NumericGreaterThan", 10, False),
    ("NumericGreaterThanEquals", 10, True), ("NumericGreaterThanEquals", 9, False),
])
def test_numeric_operators_against_10(operator, actual, holds):
    assert allowed(with_condition(operator, "10"), "s3:GetObject", context={"s3:max-keys": str(actual)}) is holds


def test_a_missing_key_satisfies_numeric_not_equals_as_every_negated_operator():
    # "Condition operators": a negated operator returns true when the key is not in the request context.
    assert allowed(with_condition("NumericNotEquals", "10"), "s3:GetObject")
    assert not allowed(with_condition("NumericEquals", "10"), "s3:GetObject")


@pytest.mark.parametrize("operator, actual, holds", [
    ("StringEqualsIgnoreCase", "GPU-Worker", True), ("StringEqualsIgnoreCase", "cpu-worker", False),
    ("StringEquals", "GPU-Worker", False), ("StringEquals", "gpu-worker", True),
])
def test_string_equals_ignores_case_only_in_its_ignore_case_form(operator, actual, holds):
    policy = [identity({"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "*",
                        "Condition": {operator: {"aws:ResourceTag/role": "gpu-worker"}}})]
    assert allowed(policy, "ec2:RunInstances", context={"aws:ResourceTag/role": actual}) is holds


def registry_policy(principal) -> list[Policy]:
    return [Policy("registry", {"Statement": [{"Effect": "Allow", "Principal": principal,
                                               "Action": "ecr:CreateRepository", "Resource": "*"}]},
                   resource_based=True)]


@pytest.mark.parametrize("principal, caller, admitted", [
    ("*", ROLE, True),  # "Principal": "*" is everyone
    ({"AWS": "*"}, ROLE, True),
    # an Allow naming the account delegates to the account's identity policies: alone, it admits none of its roles
    ({"AWS": "arn:aws:iam::111122223333:root"}, ROLE, False),
    ({"AWS": "arn:aws:iam::111122223333:root"}, "arn:aws:iam::444455556666:role/app", False),
    ({"AWS": ROLE}, ROLE, True), ({"AWS": ROLE}, "arn:aws:iam::111122223333:role/other", False),
])
def test_a_resource_policys_principal(principal, caller, admitted):
    # IAM User Guide, "AWS JSON policy elements: Principal": AWS account principals and the anonymous "*".
    assert allowed(registry_policy(principal), "ecr:CreateRepository", principal=caller) is admitted


def test_a_deny_naming_the_account_denies_its_roles():
    # A Deny in a resource policy naming the account applies to every principal in it, over the role's own Allow.
    deny = [Policy("registry", {"Statement": [{"Effect": "Deny", "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
                                               "Action": "ecr:CreateRepository", "Resource": "*"}]}, resource_based=True)]
    own = [identity({"Effect": "Allow", "Action": "ecr:CreateRepository", "Resource": "*"})]
    assert allowed(own, "ecr:CreateRepository", principal=ROLE)
    assert not allowed(own + deny, "ecr:CreateRepository", principal=ROLE)


def test_a_deny_whose_condition_fails_is_no_near_miss_of_an_allow():
    # A denial's hint names the Allow statements whose conditions failed; a Deny that did not apply is not one.
    policy = [identity({"Effect": "Deny", "Action": "s3:GetObject", "Resource": "*",
                        "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
    assert closest_statements(policy, Request(ROLE, "s3:GetObject", "*", {"aws:SecureTransport": "true"})) == []


def test_resources_match_case_sensitively():
    # "IAM JSON policy elements: Resource": ARNs are case-sensitive (an S3 key Model.pt is not model.pt).
    policy = [identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/runs/Model.pt"})]
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::b/runs/Model.pt")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::b/runs/model.pt")

