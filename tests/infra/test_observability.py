"""Container logs and Container Insights: the add-on, its credentials, and log groups held to the stack's rules."""

from __future__ import annotations

import json

from cdk_constructs import observability as obs
from tests.conftest import resources_of, template_for

# The groups the add-on writes to, by the names its chart configures (aws-observability/helm-charts,
# charts/amazon-cloudwatch-observability/values.yaml: log_group_name /aws/containerinsights/${CLUSTER_NAME}/...)
# and the agent's performance-log group.
EXPECTED_GROUPS = {"/aws/containerinsights/EksFsdpEfa/application", "/aws/containerinsights/EksFsdpEfa/dataplane",
                   "/aws/containerinsights/EksFsdpEfa/host", "/aws/containerinsights/EksFsdpEfa/performance"}


def insights_groups(template) -> dict[str, dict]:
    return {g["Properties"]["LogGroupName"]: g for g in resources_of(template, "AWS::Logs::LogGroup").values()
            if str(g["Properties"].get("LogGroupName", "")).startswith("/aws/containerinsights/")}


def test_every_group_the_addon_writes_exists_first_with_the_stacks_retention_and_key(template):
    groups = insights_groups(template)
    assert set(groups) == EXPECTED_GROUPS
    for group in groups.values():
        assert group["Properties"]["RetentionInDays"] == 30
        assert "LogsKey" in json.dumps(group["Properties"]["KmsKeyId"])
        assert group["DeletionPolicy"] == "Delete"
    [addon] = [a for a in resources_of(template, "AWS::EKS::Addon").values()
               if a["Properties"]["AddonName"] == "amazon-cloudwatch-observability"]
    logical_ids = {k for k, g in resources_of(template, "AWS::Logs::LogGroup").items()
                   if g["Properties"].get("LogGroupName") in EXPECTED_GROUPS}
    assert logical_ids <= set(addon["DependsOn"])


def test_log_retention_setting_reaches_the_container_logs():
    groups = insights_groups(template_for(log_retention_days=7))
    assert {g["Properties"]["RetentionInDays"] for g in groups.values()} == {7}


def test_the_addon_collects_container_logs_and_gpu_and_efa_metrics(template):
    [addon] = [a["Properties"] for a in resources_of(template, "AWS::EKS::Addon").values()
               if a["Properties"]["AddonName"] == "amazon-cloudwatch-observability"]
    config = json.loads(addon["ConfigurationValues"])
    assert config["containerLogs"] == {"enabled": True}
    assert config["agent"]["config"]["logs"]["metrics_collected"]["kubernetes"] == {
        "enhanced_container_insights": True, "accelerated_compute_metrics": True}
    [association] = addon["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "cloudwatch-agent"


def test_the_agent_role_is_trusted_by_its_service_account_only(template):
    [role] = [r["Properties"] for r in resources_of(template, "AWS::IAM::Role").values()
              if "cloudwatch-agent" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    condition = role["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert (condition["aws:RequestTag/kubernetes-namespace"], condition["aws:RequestTag/kubernetes-service-account"]) == (
        "amazon-cloudwatch", "cloudwatch-agent")
    assert "CloudWatchAgentServerPolicy" in json.dumps(role["ManagedPolicyArns"])


def test_log_group_names_follow_the_cluster_name():
    assert obs.log_group_names("c") == ["/aws/containerinsights/c/application", "/aws/containerinsights/c/dataplane",
                                        "/aws/containerinsights/c/host", "/aws/containerinsights/c/performance"]


def test_application_signals_stay_out_of_the_ray_pods():
    """The add-on's chart turns automatic instrumentation of every service off when the agent's configuration
    has no application_signals section (charts/amazon-cloudwatch-observability/templates/_helpers.tpl)."""
    assert "application_signals" not in json.dumps(obs.observability_configuration())
