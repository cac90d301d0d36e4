"""Log groups with a retention for the Lambda functions that aws-cdk-lib adds to the stack.

The kubectl handler, its provider framework and custom-resource providers are aws-cdk-lib's
functions. Left alone, Lambda creates /aws/lambda/<function> on their first run, with no
retention, outside the stack: it grows forever and `cdk destroy` leaves it. Each function is
pointed (LoggingConfig.LogGroup) at a group the stack owns, with the stack's retention; the
function references its group, so CloudFormation deletes the group after the function.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnResource, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

LAMBDA_FUNCTION = "AWS::Lambda::Function"
# The retention periods CloudWatch Logs accepts (PutRetentionPolicy), in days, and aws-cdk-lib's names.
RETENTION_DAYS = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS, 120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS, 180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1096: logs.RetentionDays.THREE_YEARS, 1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS, 2557: logs.RetentionDays.SEVEN_YEARS, 2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}


def logs_encryption_key(scope: Construct, id: str) -> kms.Key:
    """A KMS key for the stack's log groups (VPC flow logs name internal addresses and ports).

    CloudWatch Logs encrypts with it on the log groups' behalf, only for log groups of this account
    and region (the encryption context condition of the CloudWatch Logs user guide, "Encrypt log
    data in CloudWatch Logs using AWS KMS"). The logs go with the stack, so does the key.
    """
    key = kms.Key(scope, id, enable_key_rotation=True, removal_policy=RemovalPolicy.DESTROY,
                  pending_window=Duration.days(7), description="Encryption of the stack's CloudWatch log groups")
    key.add_to_resource_policy(iam.PolicyStatement(
        principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
        actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
        resources=["*"],
        conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"}},
    ))
    return key


def lambda_functions(scope: Construct) -> list[CfnResource]:
    return [c for c in scope.node.find_all() if isinstance(c, CfnResource) and c.cfn_resource_type == LAMBDA_FUNCTION]


class LambdaLogGroups(Construct):
    """One log group per Lambda function under `target`, each function logging to its own."""

    def __init__(self, scope: Construct, id: str, target: Construct, retention: logs.RetentionDays,
                 encryption_key: kms.IKey | None = None) -> None:
        super().__init__(scope, id)
        self.groups: dict[str, logs.LogGroup] = {}
        for function in lambda_functions(target):
            group = logs.LogGroup(self, function.node.addr[:16], retention=retention, encryption_key=encryption_key,
                                  removal_policy=RemovalPolicy.DESTROY)
            function.add_property_override("LoggingConfig.LogGroup", group.log_group_name)
            self.groups[function.node.path] = group
