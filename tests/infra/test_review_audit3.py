"""tools/review.py's paths no other test of the module ran: a job entrypoint the trainer would refuse or nodes the
planner cannot size (no plan lines), the per-run seconds without an autoscaler, a ConfigMap without the trainer's
archive, and `python -m tools.review cdk.out` itself over a cloud assembly."""

from __future__ import annotations

import base64
import io
import json
import zipfile

import pytest

from tests.infra.test_review_wiring import rayjob_template
from tools import review


@pytest.mark.parametrize("entrypoint", [
    "python -m training.train --instance-type g6.12xlarge --workers 0",  # the trainer refuses it: no plan to show
    "python -m training.train --instance-type m7i.xlarge --workers 8",  # a CPU type: no GPUs to plan on
    "python -m training.train --instance-type x9.unknown --workers 8",  # a type the table does not know
])
def test_a_job_the_planner_cannot_size_has_no_plan(monkeypatch, entrypoint):
    import planning.auto

    monkeypatch.setattr(planning.auto, "model_of", lambda cfg, context, needed: "model")
    assert review._job_plan(rayjob_template(entrypoint)) is None


def test_a_model_the_synth_did_not_size_has_no_plan(monkeypatch):
    import planning.auto

    monkeypatch.setattr(planning.auto, "model_of", lambda cfg, context, needed: None)
    assert review._job_plan(rayjob_template("python -m training.train --instance-type g6.12xlarge --workers 8")) is None


def test_no_plan_gives_no_stop_line_and_no_billed_seconds(monkeypatch):
    monkeypatch.setattr(review, "_job_plan", lambda template: None)
    assert review.training_stop_line({}) is None
    assert review.job_billed_s({}) is None and review.job_cost_usd({}) is None


def _with_autoscaler(template: dict, unneeded: str) -> dict:
    chart = {"Type": "Custom::AWSCDK-EKS-HelmChart",
             "Properties": {"Chart": "cluster-autoscaler",
                            "Values": json.dumps({"extraArgs": {"scale-down-unneeded-time": unneeded}})}}
    return {"Resources": {**template["Resources"], "Autoscaler": chart}}


def test_the_billed_seconds_are_start_training_ttl_and_scale_down_and_none_without_an_autoscaler(monkeypatch):
    # Fixed GPU nodes (gpu_scale_to_zero false) bill from deploy to destroy: no per-run seconds to give.
    job = {"kind": "RayJob", "metadata": {"name": "job"}, "spec": {"entrypoint": "x", "ttlSecondsAfterFinished": 300}}
    template = {"Resources": {"Job": {"Type": "Custom::AWSCDK-EKS-KubernetesResource",
                                      "Properties": {"Manifest": json.dumps([job])}}}}
    monkeypatch.setattr(review, "training_estimate", lambda t: ("line", type("E", (), {"run_s": 1800.0})()))
    assert review.job_billed_s(template) is None
    assert review.job_billed_s(_with_autoscaler(template, "10m")) == (review.first_step_s(), 1800.0, 300, 600.0)


def _configmap(data: dict) -> dict:
    return {"Type": "Custom::AWSCDK-EKS-KubernetesResource",
            "Properties": {"Manifest": json.dumps([{"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": "cm"}, **data}])}}


def test_only_a_configmap_carrying_the_trainer_archive_is_measured():
    from cdk_constructs.trainer_archive import ARCHIVE_KEY

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("train.py", "x = 1\n")
        archive.writestr("config.py", "y = 2\n")
    encoded = base64.b64encode(buffer.getvalue()).decode()
    template = {"Resources": {"Other": _configmap({"data": {"k": "v"}}),
                              "Trainer": _configmap({"binaryData": {ARCHIVE_KEY: encoded}})}}
    [line] = review.configmap_lines(template)
    assert line.startswith("trainer ConfigMap: ") and line.endswith("2 modules: train, config")


def test_the_cli_reviews_each_stack_of_the_assembly_with_its_nag_findings(tmp_path, capsys):
    (tmp_path / "Stack.template.json").write_text(json.dumps({"Resources": {}}))
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {
        "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}},
        "Stack.assets": {"type": "cdk:asset-manifest", "properties": {"file": "Stack.assets.json"}},
        "Stack": {"type": "aws:cloudformation:stack", "environment": "aws://123456789012/us-east-2",
                  "properties": {"templateFile": "Stack.template.json"}}}}))
    (tmp_path / "AwsSolutions-Stack-NagReport.csv").write_text(
        "Rule ID,Resource ID,Compliance,Exception Reason,Rule Level,Rule Info\n"
        "AwsSolutions-IAM4,Stack/Role,Non-Compliant,N/A,Error,managed policy\n")
    assert review.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "== Stack (aws://123456789012/us-east-2)"
    assert "   0 resources" in out
    assert "   cdk-nag: 1 checks, 1 finding(s), 0 suppressed" in out
    assert "   error AwsSolutions-IAM4 (non-compliant) Stack/Role: managed policy" in out
    assert out[-1] == f"   review everything in {tmp_path / 'Stack.template.json'}"
    assert not [line for line in out if "Tree" in line or "assets" in line]


def test_partial_capacity_bills_each_attempts_deadline_then_the_ttl_and_the_scale_down():
    # 2 attempts (backoffLimit 1) x 1,200 s + 300 s TTL + 600 s scale-down = 3,300 s = 55 min; x $4.6016/h = $4.22.
    job = {"preRunningDeadlineSeconds": 1200, "backoffLimit": 1, "ttlSecondsAfterFinished": 300}
    assert review.partial_capacity_lines(job, 4.6016, 600.0) == [
        "partial capacity: a GPU node whose partner gets no capacity bills ~55 min, ~$4.22 (2 attempt(s) x "
        "preRunningDeadlineSeconds 1200 + TTL 5 min + scale-down 10 min)"]


def test_without_a_pre_running_deadline_a_lone_node_waits_for_the_active_deadline():
    # 3,600 s + 300 s TTL + 600 s scale-down = 4,500 s = 75 min; x $4.6016/h = $5.75.
    job = {"activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 300}
    assert review.partial_capacity_lines(job, 4.6016, 600.0) == [
        "partial capacity: a GPU node whose partner gets no capacity bills until activeDeadlineSeconds: ~75 min, ~$5.75"]


def _priced_job_template(usd_per_hour: float) -> dict:
    from cdk_constructs.instance_types import PRICE_METADATA

    template = rayjob_template("python -m training.train --instance-type g6.12xlarge --workers 8")
    template["Resources"]["Gpu"] = {
        "Type": "AWS::EKS::Nodegroup", "Metadata": {PRICE_METADATA: {"usd_per_hour": usd_per_hour, "basis": "spot",
                                                                     "moves": True}},
        "Properties": {"InstanceTypes": ["g6.12xlarge"], "ScalingConfig": {"MinSize": 0, "MaxSize": 2}}}
    return template


def test_the_plan_is_costed_at_the_priced_node_hour_times_the_jobs_nodes(monkeypatch):
    import planning.auto
    import planning.timing

    monkeypatch.setattr(planning.auto, "model_of", lambda cfg, context, needed: "model")
    seen = []
    monkeypatch.setattr(planning.timing, "estimate", lambda model, work, cluster, layout: seen.append(cluster))
    review._job_plan(_priced_job_template(1.5))
    assert seen[0].nodes == 2 and seen[0].usd_per_hour == pytest.approx(3.0)


def test_the_partial_capacity_line_of_a_run_is_priced_per_node_not_per_job(monkeypatch):
    # The job's 2 nodes cost $9.2032/h together; a lone node bills half of that.
    monkeypatch.setattr(review, "training_estimate", lambda t: ("line", type("E", (), {"run_s": 1800.0})()))
    template = _with_autoscaler(_priced_job_template(4.6016), "10m")
    job = json.loads(template["Resources"]["Job"]["Properties"]["Manifest"])
    job[0]["spec"] |= {"preRunningDeadlineSeconds": 1200, "backoffLimit": 1, "ttlSecondsAfterFinished": 300}
    template["Resources"]["Job"]["Properties"]["Manifest"] = json.dumps(job)
    assert review.job_cost_lines(template, 2 * 4.6016)[-1].startswith(
        "partial capacity: a GPU node whose partner gets no capacity bills ~55 min, ~$4.22 ")
