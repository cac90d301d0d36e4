"""Our cdk-nag rules for the aws_eks_v2 cluster (stacks/eks_nag.py), and the synth review's nag lines."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks as eks_l1
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks, NagRuleCompliance

from stacks.eks_nag import EksV2Checks, missing_log_types, public_endpoint_compliance
from stacks.context import settings_from_context
from stacks.training_cluster import EfaTrainingStack
from tests.conftest import UNDER_MUTATION, base_context
from tests.infra import readme
from tools.review import nag_lines, nag_report_rows

# EKS User Guide, "Send control plane logs to CloudWatch Logs": the five control-plane log types.
ALL_LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]


@pytest.mark.parametrize("vpc_config,expected", [
    ({}, NagRuleCompliance.NON_COMPLIANT),  # CloudFormation's defaults: public endpoint on, EKS's 0.0.0.0/0
    ({"endpointPublicAccess": True}, NagRuleCompliance.NON_COMPLIANT),
    ({"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]}, NagRuleCompliance.NON_COMPLIANT),
    ({"endpointPublicAccess": True, "publicAccessCidrs": ["203.0.113.7/32", "0.0.0.0/0"]}, NagRuleCompliance.NON_COMPLIANT),
    ({"endpointPublicAccess": True, "publicAccessCidrs": ["203.0.113.7/32"]}, NagRuleCompliance.COMPLIANT),
    ({"endpointPublicAccess": False, "endpointPrivateAccess": True}, NagRuleCompliance.NOT_APPLICABLE),
])
def test_public_endpoint_rule(vpc_config, expected):
    assert public_endpoint_compliance(vpc_config) == expected


@pytest.mark.parametrize("logging,missing", [
    (None, ALL_LOG_TYPES),
    ({"clusterLogging": {"enabledTypes": [{"type": "api"}, {"type": "authenticator"}, {"type": "controllerManager"},
                                          {"type": "scheduler"}]}}, ["audit"]),
    ({"clusterLogging": {"enabledTypes": [{"type": t} for t in reversed(ALL_LOG_TYPES)]}}, []),
])
def test_control_plane_log_rule_names_the_types_left_off(logging, missing):
    assert missing_log_types(logging) == missing


def _l1_cluster_annotations(**cluster_props) -> Annotations:
    """A stack holding one bare AWS::EKS::Cluster, checked by our pack."""
    app = cdk.App()
    stack = cdk.Stack(app, "Bare")
    eks_l1.CfnCluster(stack, "Cluster", role_arn="arn:aws:iam::123456789012:role/eks",
                      resources_vpc_config=eks_l1.CfnCluster.ResourcesVpcConfigProperty(
                          subnet_ids=["subnet-0123456789abcdef0"], **cluster_props.pop("vpc", {})),
                      **cluster_props)
    cdk.Aspects.of(app).add(EksV2Checks())
    return Annotations.from_stack(stack)


def test_an_open_public_endpoint_is_a_warning():
    annotations = _l1_cluster_annotations(vpc={"endpoint_public_access": True})
    assert annotations.find_warning("*", Match.string_like_regexp("^EksV2-EKS1: ")) != []


def test_a_public_endpoint_with_cidrs_is_no_warning():
    annotations = _l1_cluster_annotations(vpc={"endpoint_public_access": True, "public_access_cidrs": ["203.0.113.7/32"]})
    assert annotations.find_warning("*", Match.string_like_regexp("^EksV2-EKS1: ")) == []


def test_control_plane_logging_off_is_an_error():
    annotations = _l1_cluster_annotations(vpc={"endpoint_public_access": False, "endpoint_private_access": True})
    assert annotations.find_error("*", Match.string_like_regexp("^EksV2-EKS2: ")) != []


def test_one_log_type_off_is_an_error():
    logging = eks_l1.CfnCluster.LoggingProperty(cluster_logging=eks_l1.CfnCluster.ClusterLoggingProperty(
        enabled_types=[eks_l1.CfnCluster.LoggingTypeConfigProperty(type=t) for t in ALL_LOG_TYPES if t != "audit"]))
    annotations = _l1_cluster_annotations(logging=logging)
    assert annotations.find_error("*", Match.string_like_regexp("^EksV2-EKS2: ")) != []


def _synth_with_nag(tmp_path, **overrides) -> list[dict]:
    """The app as `cdk synth` builds it (both nag packs), and its nag report rows."""
    if UNDER_MUTATION:
        pytest.skip("no synthesis under mutation testing")
    context = base_context() | overrides
    app = cdk.App(context=context, outdir=str(tmp_path))
    EfaTrainingStack(app, "Test", settings_from_context(context))
    cdk.Aspects.of(app).add(AwsSolutionsChecks())
    cdk.Aspects.of(app).add(EksV2Checks())
    app.synth()
    return nag_report_rows(tmp_path, "Test")


def test_default_deployment_passes_both_rules_with_the_unset_cidrs_suppressed_and_reviewed(tmp_path):
    every = _synth_with_nag(tmp_path)
    # README's review sample shows cdk-nag's lines as `make synth` prints them (counts, suppressions and reasons).
    sample = readme.sample_block("`make synth` ends with a review read from the synthesized template")
    assert readme.unshown([line for line in sample if line.startswith(("cdk-nag:", "suppressed "))], nag_lines(every)) == []
    rows = {r["Rule ID"]: r for r in every if r["Rule ID"].startswith("EksV2-")}
    assert rows["EksV2-EKS2"]["Compliance"] == "Compliant"
    assert rows["EksV2-EKS1"]["Compliance"] == "Suppressed"
    assert rows["EksV2-EKS1"]["Exception Reason"].startswith("endpoint_public_cidrs is unset: `make deploy` and `make diff`")
    assert "suppressed EksV2-EKS1 x1: endpoint_public_cidrs is unset: `make deploy` and `make diff` set it to the " \
           "deployer's address (/32)" in "\n".join(nag_lines(list(rows.values())))


def test_endpoint_opened_on_purpose_is_a_finding_in_the_review(tmp_path):
    rows = _synth_with_nag(tmp_path, endpoint_public_cidrs="0.0.0.0/0")
    assert [r["Compliance"] for r in rows if r["Rule ID"] == "EksV2-EKS1"] == ["Non-Compliant"]
    assert ("warning EksV2-EKS1 (non-compliant) Test/Eks/Cluster/Resource: The EKS cluster's public API endpoint "
            "accepts every address (no PublicAccessCidrs, or 0.0.0.0/0).") in nag_lines(rows)


def test_nag_lines_list_findings_and_each_suppression_once_with_its_reason():
    rows = [
        {"Rule ID": "AwsSolutions-IAM4", "Resource ID": "S/Role/Resource", "Compliance": "Suppressed",
         "Exception Reason": "[Policy::arn:<AWS::Partition>:iam::aws:policy/A] EKS requires it.", "Rule Level": "Error",
         "Rule Info": "managed policy"},
        {"Rule ID": "AwsSolutions-IAM4", "Resource ID": "S/Role/Resource", "Compliance": "Suppressed",
         "Exception Reason": "[Policy::arn:<AWS::Partition>:iam::aws:policy/B] EKS requires it.", "Rule Level": "Error",
         "Rule Info": "managed policy"},
        {"Rule ID": "EksV2-EKS2", "Resource ID": "S/Cluster", "Compliance": "Non-Compliant", "Exception Reason": "N/A",
         "Rule Level": "Error", "Rule Info": "logs off"},
        {"Rule ID": "AwsSolutions-S10", "Resource ID": "S/Bucket", "Compliance": "Compliant", "Exception Reason": "N/A",
         "Rule Level": "Error", "Rule Info": "TLS only"},
    ]
    assert nag_lines(rows) == [
        "cdk-nag: 4 checks, 1 finding(s), 2 suppressed",
        "error EksV2-EKS2 (non-compliant) S/Cluster: logs off",
        "suppressed AwsSolutions-IAM4 x2: EKS requires it.",
    ]
