"""The IAM evaluator of the seam harness, on IAM's documented examples (pages cited per test)."""

from __future__ import annotations

import pytest

from tools.seams.cfn import SeamError
from tools.seams.iam import Policy, Request, evaluate

ROLE = "arn:aws:iam::111122223333:role/app"


def identity(*statements: dict) -> Policy:
    return Policy("identity", {"Version": "2012-10-17", "Statement": list(statements)})


def allowed(policies: list[Policy], action: str, resource: str = "*", context: dict | None = None,
            principal: str = ROLE) -> bool:
    return evaluate(policies, Request(principal, action, resource, context or {})).allowed


# IAM User Guide, "Policy evaluation logic" (reference_policies_evaluation-logic.html): by default every
# request is denied; an explicit allow overrides it; an explicit deny in any policy overrides any allow.
def test_nothing_allows_so_the_request_is_denied_implicitly():
    decision = evaluate([identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"})],
                        Request(ROLE, "s3:PutObject", "arn:aws:s3:::b/k"))
    assert not decision.allowed and decision.reason.startswith("implicitly denied")


def test_an_explicit_deny_beats_an_allow_in_another_policy():
    policies = [identity({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}),
                Policy("guard", {"Statement": [{"Effect": "Deny", "Action": "s3:DeleteObject", "Resource": "*"}]})]
    decision = evaluate(policies, Request(ROLE, "s3:DeleteObject", "arn:aws:s3:::b/k"))
    assert not decision.allowed and "explicitly denied by guard statement 0" in decision.reason
    assert allowed(policies, "s3:GetObject", "arn:aws:s3:::b/k")


# "IAM JSON policy elements: Action": action names are case-insensitive, * and ? are wildcards.
def test_actions_match_case_insensitively_with_wildcards():
    policy = [identity({"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"})]
    assert allowed(policy, "EC2:DescribeInstances")
    assert not allowed(policy, "ec2:RunInstances")


# "IAM JSON policy elements: NotAction", its example: Allow NotAction iam:* on * allows every service but IAM.
def test_not_action_allows_everything_but_the_named_service():
    policy = [identity({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})]
    assert allowed(policy, "s3:GetObject")
    assert not allowed(policy, "iam:CreateUser")


# "IAM JSON policy elements: Resource": arn:aws:s3:::amzn-s3-demo-bucket/* covers the bucket's objects,
# not the bucket itself (ListBucket needs the bucket's ARN).
def test_an_object_wildcard_does_not_cover_the_bucket():
    policy = [identity({"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::amzn-s3-demo-bucket/*"})]
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/photos/cat.jpg")
    assert not allowed(policy, "s3:ListBucket", "arn:aws:s3:::amzn-s3-demo-bucket")


# "IAM JSON policy elements: NotResource": Deny on NotResource <bucket> denies every other resource.
def test_not_resource_deny_spares_only_the_named_resource():
    policy = [identity({"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
                       {"Effect": "Deny", "Action": "s3:*", "NotResource": ["arn:aws:s3:::keep", "arn:aws:s3:::keep/*"]})]
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::keep/a")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::other/a")


# "Condition operators", String: the StringEquals example on aws:PrincipalTag/job-category = iamuser-admin.
def test_string_equals_on_a_tag():
    policy = [identity({"Effect": "Allow", "Action": "iam:*AccessKey*", "Resource": "*",
                        "Condition": {"StringEquals": {"aws:PrincipalTag/job-category": "iamuser-admin"}}})]
    assert allowed(policy, "iam:CreateAccessKey", context={"aws:PrincipalTag/job-category": "iamuser-admin"})
    assert not allowed(policy, "iam:CreateAccessKey", context={"aws:PrincipalTag/job-category": "iamuser-Admin"})


def test_a_missing_key_fails_a_positive_operator():
    # "Condition operators": if the key is not present in the request context, the values do not match.
    policy = [identity({"Effect": "Allow", "Action": "ec2:StartInstances", "Resource": "*",
                        "Condition": {"StringEquals": {"aws:ResourceTag/team": "ml"}}})]
    assert not allowed(policy, "ec2:StartInstances")


def test_a_missing_key_satisfies_a_negated_operator():
    # "Condition operators": StringNotEquals ... returns true when the key is absent from the request.
    policy = [identity({"Effect": "Allow", "Action": "ec2:StartInstances", "Resource": "*",
                        "Condition": {"StringNotEquals": {"aws:ResourceTag/team": "ml"}}})]
    assert allowed(policy, "ec2:StartInstances")
    assert not allowed(policy, "ec2:StartInstances", context={"aws:ResourceTag/team": "ml"})


def test_if_exists_passes_when_the_key_is_absent():
    # "...IfExists condition operators": the example allows instance types t1.*, t2.*, m3.* where the key exists.
    policy = [identity({"Effect": "Allow", "Action": "ec2:*", "Resource": "*",
                        "Condition": {"StringLikeIfExists": {"ec2:InstanceType": ["t1.*", "t2.*", "m3.*"]}}})]
    assert allowed(policy, "ec2:RunInstances", context={"ec2:InstanceType": "t2.micro"})
    assert not allowed(policy, "ec2:RunInstances", context={"ec2:InstanceType": "p5.48xlarge"})
    assert allowed(policy, "ec2:CreateTags")


def test_values_of_one_key_are_ored_and_keys_are_anded():
    # "Creating a condition with multiple keys or values": several values of a key, OR; several keys, AND.
    policy = [identity({"Effect": "Allow", "Action": "autoscaling:SetDesiredCapacity", "Resource": "*",
                        "Condition": {"StringEquals": {"aws:ResourceTag/eks:cluster-name": ["a", "b"],
                                                       "aws:ResourceTag/eks:nodegroup-name": "gpu"}}})]
    both = {"aws:ResourceTag/eks:cluster-name": "b", "aws:ResourceTag/eks:nodegroup-name": "gpu"}
    assert allowed(policy, "autoscaling:SetDesiredCapacity", context=both)
    assert not allowed(policy, "autoscaling:SetDesiredCapacity", context={**both, "aws:ResourceTag/eks:nodegroup-name": "a/gpu"})


# S3 User Guide, "Bucket policy examples": deny every s3 action when aws:SecureTransport is false.
def test_the_tls_deny_refuses_plain_http_and_lets_https_through():
    bucket = Policy("bucket", {"Statement": [{"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*",
                                              "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"],
                                              "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]},
                    resource_based=True)
    grant = identity({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"})
    assert not allowed([grant, bucket], "s3:GetObject", "arn:aws:s3:::b/k", {"aws:SecureTransport": "false"})
    assert allowed([grant, bucket], "s3:GetObject", "arn:aws:s3:::b/k", {"aws:SecureTransport": "true"})


# "Condition operators", ARN: the ArnLike example on aws:SourceArn for an SNS topic.
def test_arn_like_matches_each_arn_part():
    policy = [identity({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*",
                        "Condition": {"ArnLike": {"aws:SourceArn": "arn:aws:sns:*:123456789012:topic-*"}}})]
    assert allowed(policy, "sqs:SendMessage", context={"aws:SourceArn": "arn:aws:sns:us-east-2:123456789012:topic-a"})
    assert not allowed(policy, "sqs:SendMessage", context={"aws:SourceArn": "arn:aws:sns:us-east-2:999999999999:topic-a"})


# "Condition operators", Null: "Null": {"aws:TokenIssueTime": "true"} matches requests without temporary credentials.
def test_null_checks_the_key_is_absent():
    policy = [identity({"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
                       {"Effect": "Deny", "Action": "s3:*", "Resource": "*",
                        "Condition": {"Null": {"aws:TokenIssueTime": "true"}}})]
    assert not allowed(policy, "s3:GetObject")
    assert allowed(policy, "s3:GetObject", context={"aws:TokenIssueTime": "2026-12-05T00:00:00Z"})


# "Single-valued vs. multivalued context keys": ForAnyValue needs one request value to match; ForAllValues
# every one (and is true for an empty set).
def test_for_any_value_and_for_all_values_on_tag_keys():
    any_policy = [identity({"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*",
                            "Condition": {"ForAnyValue:StringEquals": {"aws:TagKeys": ["environment", "cost-center"]}}})]
    all_policy = [identity({"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*",
                            "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": ["environment", "cost-center"]}}})]
    mixed = {"aws:TagKeys": ["environment", "owner"]}
    assert allowed(any_policy, "ec2:CreateTags", context=mixed)
    assert not allowed(all_policy, "ec2:CreateTags", context=mixed)
    assert allowed(all_policy, "ec2:CreateTags", context={"aws:TagKeys": ["cost-center"]})


# Same page: "ForAllValues ... returns true if there are no context keys in the request", so an Allow under
# it also allows a request that carries no tags at all; ForAnyValue does not.
def test_for_all_values_holds_when_the_request_lacks_the_key():
    condition = {"aws:TagKeys": ["environment", "cost-center"]}
    all_policy = [identity({"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*",
                            "Condition": {"ForAllValues:StringEquals": condition}})]
    any_policy = [identity({"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*",
                            "Condition": {"ForAnyValue:StringEquals": condition}})]
    assert allowed(all_policy, "ec2:CreateTags")
    assert not allowed(any_policy, "ec2:CreateTags")


# A role's trust policy: a resource-based policy whose Principal must name the caller.
def test_a_trust_policy_admits_only_its_principal():
    trust = Policy("trust", {"Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                                            "Action": ["sts:AssumeRole", "sts:TagSession"]}]}, resource_based=True)
    assert allowed([trust], "sts:AssumeRole", ROLE, principal="pods.eks.amazonaws.com")
    assert not allowed([trust], "sts:AssumeRole", ROLE, principal="ec2.amazonaws.com")


def test_a_policy_variable_is_refused_not_guessed():
    policy = [identity({"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::b/${aws:username}/*"})]
    with pytest.raises(SeamError, match=r"policy variable"):
        allowed(policy, "s3:GetObject", "arn:aws:s3:::b/alice/k")


# "Condition operators", ARN: each of the six colon-delimited parts is compared; the sixth, the resource, may
# hold colons itself (CloudWatch Logs' KMS key policy: kms:EncryptionContext:aws:logs:arn on a log group).
def test_arn_like_keeps_the_colons_of_the_resource_part():
    policy = [identity({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "*", "Condition": {"ArnLike": {
        "kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:us-east-1:111122223333:log-group:*"}}})]
    assert allowed(policy, "kms:Decrypt", context={
        "kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:us-east-1:111122223333:log-group:my-group"})
