"""cdk_constructs/ray_manifests.py case by case: the RayJob's annotations that the tools read back (the synth review's
auto line, the seam harness's upstream image), the run name across an MLflow tracker, and the deadlines a job takes."""

from __future__ import annotations

import dataclasses

import pytest

from cdk_constructs import ray_manifests as rm

UPSTREAM = "public.ecr.aws/deep-learning-containers/ray:2.58.0"
CACHED = "111122223333.dkr.ecr.us-east-2.amazonaws.com/ecr-public/deep-learning-containers/ray:2.58.0"


def job(pulled_image: str | None = None, auto_line: str | None = None, **options) -> rm.RayJobSpec:
    pods = rm.RayClusterSpec(image=UPSTREAM, service_account="ray", trainer_files={"training/train.py": "x = 1\n"},
                             worker_replicas=2, gpus_per_worker=4, efa_per_worker=1, cpu_per_worker=40,
                             memory_gib_per_worker=160, pulled_image=pulled_image)
    return rm.RayJobSpec(namespace="training", cluster=pods, trainer_options={"model": "tiny", "steps": 5, **options},
                         storage_path="s3://b/runs", auto_line=auto_line)


def test_a_job_pulled_through_the_cache_names_the_upstream_image_it_stands_for():
    # tools/seams/registry.py holds the cache rule against the image the pods stand for, not the cache's URI.
    manifest = rm.ray_job_manifest(job(pulled_image=CACHED))
    assert manifest["metadata"]["annotations"]["eks-fsdp-efa/image-source"] == UPSTREAM
    head = manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == CACHED


def test_a_job_pulling_from_the_images_own_registry_has_no_image_source():
    assert "eks-fsdp-efa/image-source" not in rm.ray_job_manifest(job())["metadata"]["annotations"]


def test_the_planners_auto_line_is_the_jobs_auto_annotation_and_only_when_there_is_one():
    # tools/review.py prints what the planner picked from this annotation.
    line = "auto: micro_batch 2, sharding full (fits 24 GiB)"
    assert rm.ray_job_manifest(job(auto_line=line))["metadata"]["annotations"]["eks-fsdp-efa/auto"] == line
    assert "eks-fsdp-efa/auto" not in rm.ray_job_manifest(job())["metadata"]["annotations"]


@pytest.mark.parametrize("options", [
    {"tracking": "mlflow", "mlflow_tracking_uri": "http://mlflow.tracking:5000"},
    {"tracking": "mlflow", "mlflow_tracking_uri": "http://mlflow.tracking:5000", "mlflow_experiment": "qwen-sft"},
    {"tracking": "wandb", "wandb_project": "qwen"},
    {"tracking": "wandb", "wandb_project": "qwen", "wandb_entity": "team"},
])
def test_turning_a_tracker_on_keeps_the_run_and_its_checkpoints(options):
    # Where a run is reported is not what it trains: each tracker option alone keeps the run name.
    tracked = job(**options)
    assert tracked.run_name == job().run_name and tracked.name != job().name


def test_an_option_that_changes_what_is_trained_is_a_new_run():
    assert job(learning_rate=1e-4).run_name != job(learning_rate=2e-4).run_name


@pytest.mark.parametrize("pre_running,active", [(1, 2), (3599, 3600)])
def test_any_positive_pre_running_deadline_below_the_active_one_is_taken(pre_running, active):
    # KubeRay takes any positive preRunningDeadlineSeconds; below activeDeadlineSeconds it can still fire.
    timed = dataclasses.replace(job(), pre_running_deadline_seconds=pre_running, active_deadline_seconds=active)
    spec = rm.ray_job_manifest(timed)["spec"]
    assert (spec["preRunningDeadlineSeconds"], spec["activeDeadlineSeconds"]) == (pre_running, active)
