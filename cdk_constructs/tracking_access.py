"""What the Ray pods' role may do for the run's experiment tracker: its SageMaker MLflow calls on the one
tracking server or MLflow App, or reading the one secret that holds the W&B API key.

tools/seams judges these grants against the calls the trainer makes (training/tracking.py MLFLOW_OPERATIONS,
which test_train_ray proves against a real server's access log), as IAM evaluates them.
"""

from __future__ import annotations

import re

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

# The operations the trainer's MlflowClient calls, as IAM actions on a tracking server: the service prefix
# sagemaker-mlflow, one action per MLflow REST operation (Service Authorization Reference, "Actions, resources,
# and condition keys for Amazon SageMaker with MLflow"; resource type mlflow-tracking-server).
MLFLOW_ACTIONS = tuple(f"sagemaker-mlflow:{op}" for op in (
    "GetExperimentByName", "CreateExperiment", "CreateRun", "GetRun", "GetMetricHistory", "LogBatch", "UpdateRun"))
# An MLflow App's requests are signed for the service sagemaker (sagemaker-mlflow 0.5.0, auth_provider.py
# _get_auth_service_name) and authorized as sagemaker:CallMlflowAppApi on the app; AWS's own policies for apps
# grant it with the sagemaker-mlflow actions on the app's ARN (SageMaker AI Developer Guide, multi-turn RL
# prerequisites, the policy equivalent to AmazonSageMakerJobFullAccess: statement MLflowPermissions).
MLFLOW_APP_ACTION = "sagemaker:CallMlflowAppApi"
SAGEMAKER_MLFLOW_ARN = re.compile(r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:(mlflow-tracking-server|mlflow-app)/.+")
# Secrets Manager appends six random characters to a secret's name in its ARN; a policy names the secret with
# -?????? (Secrets Manager User Guide, "Permissions policy examples": "-??????" matches the random suffix).
SECRET_SUFFIX = "-??????"


def grant_tracking_access(role: iam.IRole, mlflow_tracking_uri: str | None, wandb_api_key_secret: str | None) -> None:
    """The tracker's calls on exactly its resource: nothing for none or an http(s) MLflow server."""
    server = SAGEMAKER_MLFLOW_ARN.fullmatch(mlflow_tracking_uri or "")
    if server:
        app = server.group(1) == "mlflow-app"
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=[*MLFLOW_ACTIONS, *([MLFLOW_APP_ACTION] if app else [])], resources=[mlflow_tracking_uri]))
    if wandb_api_key_secret:
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["secretsmanager:GetSecretValue"], resources=[secret_arn(wandb_api_key_secret)]))


def secret_arn(secret: str) -> str:
    """The secret's ARN as given, or every ARN its name may have in the region and account the stack deploys to
    (where the pods, holding only its name, read it)."""
    if secret.startswith("arn:"):
        return secret
    return f"arn:{Aws.PARTITION}:secretsmanager:{Aws.REGION}:{Aws.ACCOUNT_ID}:secret:{secret}{SECRET_SUFFIX}"
