"""The IAM evaluator (tools.seams.iam): wildcards take only * and ? as special, a missing key under every negated
operator, and a Deny naming an account root reaches only that account's principals."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_iam import ROLE, allowed, identity
from tools.seams.iam import Policy, Request, closest_statements


@pytest.mark.parametrize("resource, matches", [
    ("arn:aws:s3:::runs.v1/model.pt", True),
    # "IAM JSON policy elements: Resource": only * and ? are wildcards; a '.' is itself, not any character
    ("arn:aws:s3:::runsXv1/model.pt", False),
    ("arn:aws:s3:::runs.v1/modelXpt", False),
])
def test_a_dot_in_a_resource_pattern_matches_only_a_dot(resource, matches):
    policy = [identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::runs.v1/model.pt"})]
    assert allowed(policy, "s3:GetObject", resource) is matches


@pytest.mark.parametrize("operator", ["StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike",
                                      "ArnNotEquals", "ArnNotLike", "NumericNotEquals"])
def test_a_deny_on_a_missing_key_applies_under_every_negated_operator(operator):
    # IAM User Guide, "Condition operators": a negated operator on a key absent from the request returns true, so
    # a Deny such as "ArnNotLike aws:SourceArn <cluster>" denies a call that carries no SourceArn at all.
    policies = [identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}),
                identity({"Effect": "Deny", "Action": "s3:GetObject", "Resource": "*",
                          "Condition": {operator: {"aws:SourceArn": "arn:aws:eks:us-east-2:111122223333:cluster/x"}}})]
    assert not allowed(policies, "s3:GetObject")


@pytest.mark.parametrize("root, denied", [
    ("arn:aws:iam::111122223333:root", True),  # the caller's own account: every role in it
    ("arn:aws:iam::444455556666:root", False),  # another account: none of ours
])
def test_a_deny_naming_an_account_root_reaches_only_that_accounts_roles(root, denied):
    # "AWS JSON policy elements: Principal", AWS account principals: the root ARN stands for that account.
    own = [identity({"Effect": "Allow", "Action": "ecr:CreateRepository", "Resource": "*"})]
    deny = [Policy("registry", {"Statement": [{"Effect": "Deny", "Principal": {"AWS": root},
                                               "Action": "ecr:CreateRepository", "Resource": "*"}]}, resource_based=True)]
    assert allowed(own + deny, "ecr:CreateRepository", principal=ROLE) is not denied


@pytest.mark.parametrize("value, present, holds", [
    (True, False, True), (True, True, False), (False, True, True), (False, False, False),
])
def test_a_null_condition_written_as_a_json_boolean(value, present, holds):
    # "Condition operators", Null: true means the key is absent, false present; a policy may write JSON true/false.
    policy = [identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*",
                        "Condition": {"Null": {"aws:ResourceTag/team": value}}})]
    context = {"aws:ResourceTag/team": "ml"} if present else {}
    assert allowed(policy, "s3:GetObject", context=context) is holds


def test_a_near_miss_names_only_an_allow_for_the_requested_resource():
    # A denial's hint is an Allow whose action and resource match and only its condition failed; one for another
    # bucket is no near miss.
    policy = [identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other/*",
                        "Condition": {"Bool": {"aws:SecureTransport": "true"}}})]
    assert closest_statements(policy, Request(ROLE, "s3:GetObject", "arn:aws:s3:::runs/k", {})) == []
