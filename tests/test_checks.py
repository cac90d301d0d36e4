"""Outside truth over the whole synthesized app: cfn-lint, cdk-nag, and the synth review."""

from __future__ import annotations

import json

import aws_cdk as cdk
import cfnlint.api
import pytest
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks

from tests.conftest import synth_stack, template_for
from tools.review import review_lines

VARIANTS = {
    "default": {},
    "p5-reservation": {"gpu_instance_type": "p5.48xlarge", "capacity_reservation_id": "cr-0123456789abcdef0",
                       "admin_principal_arn": "arn:aws:iam::123456789012:role/admin", "endpoint_access": "private"},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_cfn_lint_reports_no_errors(variant):
    matches = cfnlint.api.lint(json.dumps(template_for(**VARIANTS[variant]).to_json()), regions=["us-east-2"])
    errors = [f"{m.rule.id} {m.message}" for m in matches if m.rule.severity == "error"]
    assert errors == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_cdk_nag_aws_solutions_has_no_unsuppressed_findings(variant):
    stack = synth_stack(**VARIANTS[variant])
    cdk.Aspects.of(stack.node.root).add(AwsSolutionsChecks())
    annotations = Annotations.from_stack(stack)
    findings = [f"{e.id}: {e.entry.data}" for e in annotations.find_error("*", Match.string_like_regexp("AwsSolutions-"))]
    findings += [f"{e.id}: {e.entry.data}" for e in annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-"))]
    assert findings == []


def test_review_prices_the_reference_deployment_at_about_9_50_per_hour(template):
    lines = review_lines(template.to_json())
    cost = next(line for line in lines if line.startswith("estimated on-demand cost"))
    dollars = float(cost.split("$")[1].split("/")[0])
    assert 9.0 <= dollars <= 10.0
    assert any("2 x g6.12xlarge" in line and "AZ us-east-2a" in line for line in lines)


def test_review_follows_overrides():
    lines = review_lines(template_for(gpu_node_count=4).to_json())
    assert any("4 x g6.12xlarge" in line for line in lines)
