"""Outside truth over the whole synthesized app: cfn-lint, cdk-nag, and the synth review."""

from __future__ import annotations

import json
import re
import shlex

import aws_cdk as cdk
import cfnlint.api
import pytest
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks

from tests.conftest import synth_stack, template_for
from tools.review import review_lines

VARIANTS = {
    "default": {},
    # With a SageMaker MLflow tracker: its grant to the Ray pods under cfn-lint and cdk-nag (and tools/seams).
    "p5-reservation": {"gpu_instance_type": "p5.48xlarge", "capacity_reservation_id": "cr-0123456789abcdef0",
                       "admin_principal_arn": "arn:aws:iam::123456789012:role/admin", "endpoint_access": "private",
                       "training.tracking": "mlflow",
                       "training.mlflow_tracking_uri": "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team"},
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


def _idle(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("idle cost"))


def test_review_prices_the_idle_deployment_without_gpu_nodes(template):
    """On-demand list prices: EKS $0.10 + 1 x m7i.xlarge $0.2016 + 1 NAT gateway $0.045 + the image cache's two
    interface endpoints in one AZ, 2 x $0.01 (AWS PrivateLink pricing) = $0.3666/h."""
    lines = review_lines(template.to_json())
    assert _idle(lines).startswith("idle cost (no job running): $0.37/hour ($9/day;")
    assert "interface endpoints: 2 endpoint-AZ(s): $0.020/h (plus $0.01/GB processed)" in lines
    assert any("0 to 2 (autoscaled) x g6.12xlarge" in line and "AZ us-east-2a" in line
               and "$9.20/h while a job runs" in line for line in lines)  # 2 x $4.6016


def test_review_prices_fixed_gpu_nodes_as_idle():
    """$0.3666 + 2 x g6.12xlarge $4.6016 = $9.5698/h."""
    lines = review_lines(template_for(gpu_scale_to_zero=False).to_json())
    assert _idle(lines).startswith("idle cost (no job running): $9.57/hour")
    assert "per run: GPU nodes run from deploy to destroy (gpu_scale_to_zero is false); see the hourly cost" in lines


def test_review_follows_overrides():
    lines = review_lines(template_for(gpu_node_count=4).to_json())
    assert any("0 to 4 (autoscaled) x g6.12xlarge" in line for line in lines)
    # The same 65,536-token batch on 16 GPUs: 65,536 / (16 x 2,048) = 2 sequences each per step, not 4.
    assert any(line.startswith("training: 4 x g6.12xlarge, hybrid+bf16, micro-batch 2 x 1 accumulation") for line in lines)


def test_review_names_the_batch_that_makes_the_link_cheap(template):
    lines = review_lines(template_for(**{"training.micro_batch": 1, "training.activation_checkpointing": "full"}).to_json())
    training = next(i for i, line in enumerate(lines) if line.startswith("training: 2 x g6.12xlarge, hybrid+bf16, "
                                                                          "micro-batch 1 x 4 accumulation"))
    assert lines[training + 1].startswith("batch: the links cost ")
    assert "at 65,536 tokens; from batch_tokens " in lines[training + 1] and "~$" in lines[training + 1]


def test_review_prints_what_auto_picked_and_why_as_the_synth_resolved_it(template):
    """The default deployment leaves the micro-batch, recomputation and sharding to auto: the synth resolves them
    into the entrypoint and the review shows the pick and its reason under the training line (the planner's own
    line for these settings); a run with all three set has no auto line."""
    from stacks.context import settings_from_context
    from stacks.settings import planned_trainer_options
    from tests.conftest import base_context

    lines = review_lines(template.to_json())
    training = next(i for i, line in enumerate(lines) if line.startswith("training: "))
    options, line = planned_trainer_options(settings_from_context(base_context()))
    assert lines[training + 1] == line
    assert line.startswith("auto: hybrid+bf16, micro-batch ") and ": fastest that fits on 2 x g6.12xlarge, ~" in line
    assert f"micro-batch {options['micro_batch']} x " in lines[training]
    fixed = review_lines(template_for(**{"training.micro_batch": 1, "training.activation_checkpointing": "full",
                                         "training.sharding": "hybrid"}).to_json())
    assert not any(line.startswith("auto: ") for line in fixed)


def test_per_run_cost_counts_the_gpu_nodes_from_start_to_removal(template, monkeypatch):
    """A worked example: a 10-minute training, start 180 s + 12 GiB at 150 MiB/s (81.92 s), TTL 300 s,
    scale-down 300 s: 1461.92 s of 2 x $4.6016/h = $3.74."""
    import tools.review as review

    monkeypatch.setattr(review, "training_estimate", lambda t: ("training: ...", type("E", (), {"run_s": 600.0})()))
    [start, run, _] = review.job_cost_lines(template.to_json(), 2 * 4.6016)
    assert start.startswith("deploy to first step: ~4 min after the stack is up")
    assert run.startswith("per run: ~$3.74 of GPU nodes ($9.20/h for ~24 min: start ~4 + training ~10 + TTL 5 + scale-down 5)")


def test_the_reviews_training_plan_runs_on_the_deployments_nodes(template):
    """8 workers (training.workers) on g6.12xlarge (4 L4 each) are 2 nodes, the gpu_node_count of cdk.json: the
    plan's line names them and prices 2 nodes, not one per worker."""
    import tools.review as review

    line, _ = review.training_estimate(template.to_json())
    assert line.startswith("training: 2 x g6.12xlarge, ")
    p5 = review.training_estimate(template_for(**VARIANTS["p5-reservation"]).to_json())[0]
    assert p5.startswith("training: 2 x p5.48xlarge, ")  # 16 workers, 8 H100 per node


def test_per_run_cost_counts_each_gpu_nodes_image_pull_through_the_nat(template, monkeypatch):
    """2 nodes x 12 GiB = 25.77 GB at the NAT gateway's $0.045/GB processed (Amazon VPC pricing, us-east-2) = $1.16."""
    import tools.review as review

    monkeypatch.setattr(review, "training_estimate", lambda t: ("training: ...", type("E", (), {"run_s": 600.0})()))
    run = review.job_cost_lines(template_for(image_pull_through_cache=False).to_json(), 2 * 4.6016)[1]
    assert "+ ~$1.16 pulling the image through the NAT (2 x 12 GiB at $0.045/GB processed)" in run
    cached = review.job_cost_lines(template.to_json(), 2 * 4.6016)[1]
    assert "+ the image through the ECR pull-through cache (layers from S3 off the NAT: ~$0)" in cached


def test_the_review_prices_a_lone_gpu_node_waiting_for_its_partner(template):
    """KubeRay v1.7.0 retries PreRunningDeadlineExceeded under backoffLimit: 2 attempts x 1,200 s + TTL 300 s +
    scale-down 300 s = 3,000 s of one $4.6016/h node = $3.83; without the deadline, 4 h + 600 s = $19.17."""
    import tools.review as review

    job = {"preRunningDeadlineSeconds": 1200, "activeDeadlineSeconds": 14400, "backoffLimit": 1, "ttlSecondsAfterFinished": 300}
    assert review.partial_capacity_lines(job, 4.6016, 300) == [
        "partial capacity: a GPU node whose partner gets no capacity bills ~50 min, ~$3.83 (2 attempt(s) x "
        "preRunningDeadlineSeconds 1200 + TTL 5 min + scale-down 5 min)"]
    del job["preRunningDeadlineSeconds"]
    assert review.partial_capacity_lines(job, 4.6016, 300) == [
        "partial capacity: a GPU node whose partner gets no capacity bills until activeDeadlineSeconds: ~250 min, ~$19.17"]
    assert any(line.startswith("partial capacity: a GPU node whose partner gets no capacity bills ~50 min")
               for line in review_lines(template.to_json()))


def test_the_review_shows_the_configmaps_stored_bytes_and_modules(template):
    from cdk_constructs import ray_manifests as rm
    from cdk_constructs.training_workload import TRAINER_PACKAGE

    [line] = [line for line in review_lines(template.to_json()) if line.startswith("trainer ConfigMap: ")]
    stored = int(re.search(r"^trainer ConfigMap: ([\d,]+) bytes stored by `kubectl apply`", line)[1].replace(",", ""))
    assert stored <= 196_608 and "of the API server's 262,144 (synth refuses above 196,608)" in line
    modules = [path.removesuffix(".py") for path in rm.trainer_files(TRAINER_PACKAGE)]
    assert line.endswith(f"{len(modules)} modules: " + ", ".join(modules))
