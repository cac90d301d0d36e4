"""cdk_constructs/log_groups.py: every aws-cdk-lib Lambda logs to a group the stack owns, with the stack's
retention and logs key, and the key lets CloudWatch Logs use it for this account's and region's log groups only."""

from __future__ import annotations

import json

import pytest

from tests.conftest import UNDER_MUTATION, resources_of

# The values CloudWatch Logs' PutRetentionPolicy accepts for retentionInDays, and aws-cdk-lib's RetentionDays
# member for each (aws-logs RetentionDays: the member's value is its number of days).
CLOUDWATCH_RETENTION = {
    1: "ONE_DAY", 3: "THREE_DAYS", 5: "FIVE_DAYS", 7: "ONE_WEEK", 14: "TWO_WEEKS", 30: "ONE_MONTH",
    60: "TWO_MONTHS", 90: "THREE_MONTHS", 120: "FOUR_MONTHS", 150: "FIVE_MONTHS", 180: "SIX_MONTHS",
    365: "ONE_YEAR", 400: "THIRTEEN_MONTHS", 545: "EIGHTEEN_MONTHS", 731: "TWO_YEARS", 1096: "THREE_YEARS",
    1827: "FIVE_YEARS", 2192: "SIX_YEARS", 2557: "SEVEN_YEARS", 2922: "EIGHT_YEARS", 3288: "NINE_YEARS",
    3653: "TEN_YEARS",
}


@pytest.mark.skipif(UNDER_MUTATION, reason="aws-cdk-lib's enum needs jsii")
def test_each_retention_in_days_is_aws_cdk_libs_member_of_that_many_days():
    from cdk_constructs.log_groups import RETENTION_DAYS

    assert {days: member.value for days, member in RETENTION_DAYS.items()} == CLOUDWATCH_RETENTION


synth_only = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def _resource(template: dict, ref: dict) -> dict:
    return template["Resources"][ref["Ref"]]


@synth_only
def test_every_lambda_logs_to_a_group_of_its_own_with_the_stacks_retention_and_key(template):
    tpl = template.to_json()
    functions = resources_of(template, "AWS::Lambda::Function")
    groups = [f["Properties"]["LoggingConfig"]["LogGroup"] for f in functions.values()]
    assert functions and len({g["Ref"] for g in groups}) == len(functions)
    [key] = [k for k in resources_of(template, "AWS::KMS::Key") if k.startswith("LogsKey")]
    for ref in groups:
        group = _resource(tpl, ref)
        assert group["Type"] == "AWS::Logs::LogGroup"
        assert group["Properties"]["RetentionInDays"] == 30  # cdk.json's log_retention_days
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
        # Deleted with the stack (not left behind growing, as Lambda's own /aws/lambda/<function> group would be).
        assert group["DeletionPolicy"] == "Delete"


@synth_only
def test_the_logs_key_serves_cloudwatch_logs_for_this_accounts_and_regions_log_groups_only(template):
    [key] = [r for k, r in resources_of(template, "AWS::KMS::Key").items() if k.startswith("LogsKey")]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Delete"
    [logs] = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Service" in s["Principal"]]
    # The CloudWatch Logs user guide's key policy: the regional service principal, the encryption context condition.
    assert logs["Principal"]["Service"] == {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    assert {"kms:Encrypt*", "kms:Decrypt*", "kms:GenerateDataKey*"} <= set(logs["Action"])
    condition = json.dumps(logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"])
    assert condition == json.dumps({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":logs:", {"Ref": "AWS::Region"},
                                                     ":", {"Ref": "AWS::AccountId"}, ":log-group:*"]]})
