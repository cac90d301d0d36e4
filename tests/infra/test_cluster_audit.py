"""cdk_constructs/cluster.py on the default template: every control-plane log type, no hidden creator admin, and a
kubectl handler that keeps only what it runs on."""

from __future__ import annotations

import json

import pytest

from tests.conftest import UNDER_MUTATION, only, resources_of

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def test_all_five_control_plane_log_types_go_to_cloudwatch(template):
    # The EKS User Guide ("Send control plane logs to CloudWatch Logs") lists five; each left off is unrecoverable.
    cluster = only(template, "AWS::EKS::Cluster")
    enabled = [t["Type"] for t in cluster["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]]
    assert sorted(enabled) == ["api", "audit", "authenticator", "controllerManager", "scheduler"]


def test_the_deploying_role_gets_no_hidden_cluster_admin(template):
    # AWS::EKS::Cluster's AccessConfig: true gives the creator an access entry the template does not show.
    access = only(template, "AWS::EKS::Cluster")["Properties"]["AccessConfig"]
    assert access == {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": False}


def _handler_role(template) -> tuple[str, dict]:
    [(role_id, role)] = [(k, r) for k, r in resources_of(template, "AWS::IAM::Role").items()
                         if k.startswith("EksClusterKubectlProviderHandlerServiceRole")]
    return role_id, role


def test_the_kubectl_handler_keeps_lambdas_logs_and_vpc_access_only(template):
    _, role = _handler_role(template)
    names = [arn["Fn::Join"][1][-1].rsplit("/", 1)[-1] for arn in role["Properties"]["ManagedPolicyArns"]]
    assert sorted(names) == ["AWSLambdaBasicExecutionRole", "AWSLambdaVPCAccessExecutionRole"]


def test_the_kubectl_handler_may_read_no_registry(template):
    # Our charts come from HTTPS repositories: aws-cdk-lib's ECR and ECR Public reads for OCI charts are removed.
    role_id, _ = _handler_role(template)
    actions = [json.dumps(s["Action"]) for p in resources_of(template, "AWS::IAM::Policy").values()
               if {"Ref": role_id} in p["Properties"]["Roles"] for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert actions and not [a for a in actions if "ecr" in a]
