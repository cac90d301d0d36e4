"""What the Ray pods' role is granted for the experiment tracker (cdk_constructs.tracking_access), case by case:
each tracker and resource form, and the ones that get nothing."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from cdk_constructs.tracking_access import MLFLOW_ACTIONS, MLFLOW_APP_ACTION, grant_tracking_access, secret_arn
from tools.seams.cfn import Resolver


CN_SERVER = "arn:aws-cn:sagemaker:cn-north-1:123456789012:mlflow-tracking-server/team"
GOV_SERVER = "arn:aws-us-gov:sagemaker:us-gov-west-1:123456789012:mlflow-tracking-server/team"
SERVER_NAMED_APP = "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/mlflow-app-team"
APP = "arn:aws:sagemaker:us-east-2:123456789012:mlflow-app/app-0a1b2c3d"
SECRET_ARN = "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:wandb-key-AbCdEf"
CASES = {  # role name: (mlflow_tracking_uri, wandb_api_key_secret)
    "Cn": (CN_SERVER, None), "Gov": (GOV_SERVER, None), "NamedApp": (SERVER_NAMED_APP, None), "App": (APP, None),
    "NoUri": (None, None), "Empty": ("", None), "Http": ("http://mlflow.training:5000", None),
    "Https": ("https://mlflow.example.com", None), "SecretArn": (None, SECRET_ARN), "SecretName": (None, "wandb-key"),
    "Both": (APP, "wandb-key")}


@pytest.fixture(scope="module")
def granted() -> dict[str, list[dict]]:
    """Each case's statements, from one synthesized stack (a role per case), resolved as CloudFormation resolves
    them (us-east-2, the harness's account)."""
    stack = Stack(App(), "Tracking")
    for name, (uri, secret) in CASES.items():
        grant_tracking_access(iam.Role(stack, name, assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com")),
                              uri, secret)
    t = Template.from_stack(stack).to_json()
    r, found = Resolver(t), {name: [] for name in CASES}
    for resource in t["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy":
            [role] = resource["Properties"]["Roles"]
            found[role["Ref"][:-8]] += r.resolve(resource["Properties"]["PolicyDocument"])["Statement"]
    return found


@pytest.mark.parametrize("case, uri", [("Cn", CN_SERVER), ("Gov", GOV_SERVER)])
def test_a_tracking_server_in_another_partition_is_granted_too(granted, case, uri):
    # An ARN's partition is aws, aws-cn or aws-us-gov (IAM User Guide, "IAM ARNs").
    [statement] = granted[case]
    assert statement["Resource"] == uri and statement["Action"] == list(MLFLOW_ACTIONS)


@pytest.mark.parametrize("case, app_action", [("NamedApp", False), ("App", True)])
def test_only_an_mlflow_apps_arn_gets_the_app_action(granted, case, app_action):
    # The resource type is the ARN's, not a word in the server's name: a tracking server named mlflow-app-team
    # is a tracking server.
    [statement] = granted[case]
    assert (MLFLOW_APP_ACTION in statement["Action"]) is app_action


@pytest.mark.parametrize("case", ["NoUri", "Empty", "Http", "Https"])
def test_no_sagemaker_tracking_server_gets_no_statement(granted, case):
    assert granted[case] == []


def test_a_secret_named_by_its_arn_is_granted_on_that_arn(granted):
    # An ARN already carries Secrets Manager's suffix: it is the resource as given, in any partition.
    assert secret_arn(SECRET_ARN) == SECRET_ARN
    assert granted["SecretArn"] == [{"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": SECRET_ARN}]


def test_a_secret_named_by_its_name_is_granted_in_the_stacks_region_and_account(granted):
    [statement] = granted["SecretName"]
    assert statement["Resource"] == "arn:aws:secretsmanager:us-east-2:111122223333:secret:wandb-key-??????"


def test_a_tracking_server_and_a_secret_are_granted_each(granted):
    # The two grants are independent: a URI and a secret given together get both statements.
    assert sorted(s["Resource"] for s in granted["Both"]) == [
        APP, "arn:aws:secretsmanager:us-east-2:111122223333:secret:wandb-key-??????"]
