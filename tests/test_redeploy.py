"""The second `cdk deploy`: what a changed setting or trainer does to objects that already exist.

kubectl's --prune (aws-cdk-lib's handler) leaves custom resources alone, KubeRay keeps a RayCluster's
pods when its template changes and ignores a new spec on a finished clusterSelector RayJob. So a
change must reach the cluster as new objects under new names, in CloudFormation resources with new
logical ids (created, then the old ones deleted in the cleanup phase); no change must change nothing.
"""

from __future__ import annotations

import json
import shutil

import pytest
from aws_cdk import Stack

from cdk_constructs import training_workload
from tests.conftest import ROOT, synth_stack


def deployed(**overrides) -> dict:
    """What one deploy of these settings puts on the cluster, and under which CloudFormation ids."""
    workload = synth_stack(**overrides).training
    return {
        "cluster": workload.ray_cluster_name,
        "configmap": workload.configmap_manifest["metadata"]["name"],
        "job": workload.job_name,
        "run": workload.run_name,
        "cluster_resource": workload.ray_cluster.node.path,
        "job_resource": workload.ray_job.node.path,
        # resolved: the bucket name is a deploy-time reference, its token's number varies per synthesis
        "job_spec": Stack.of(workload).resolve(workload.ray_job_manifest["spec"]),
    }


@pytest.fixture(scope="module")
def first():
    return deployed()


@pytest.fixture
def edited_trainer(tmp_path, monkeypatch):
    """A copy of the trainer package with one file edited, as a developer would between deploys."""
    def edit(filename: str):
        package = tmp_path / "training"
        shutil.copytree(ROOT / "training", package, ignore=shutil.ignore_patterns("__pycache__"))
        (package / filename).write_text((package / filename).read_text() + "\n# edited\n")
        monkeypatch.setattr(training_workload, "TRAINER_PACKAGE", package)
    return edit


def test_same_settings_give_the_same_names_and_resources(first):
    again = deployed()
    assert again == first


def test_changed_training_setting_is_a_new_job_and_run_on_the_same_cluster(first):
    changed = deployed(**{"training.steps": 300})
    assert changed["cluster"] == first["cluster"] and changed["cluster_resource"] == first["cluster_resource"]
    assert changed["job"] != first["job"] and changed["run"] != first["run"]
    assert changed["job_resource"] != first["job_resource"]  # created anew, the old RayJob deleted
    assert "--run-name=" + changed["run"] in json.dumps(changed["job_spec"]["entrypoint"])


def test_changed_trainer_reaches_the_workers_as_a_new_cluster_and_run(first, edited_trainer):
    edited_trainer("train.py")
    changed = deployed()
    assert changed["configmap"] != first["configmap"]
    assert changed["cluster"] != first["cluster"] and changed["cluster_resource"] != first["cluster_resource"]
    assert changed["run"] != first["run"] and changed["job_resource"] != first["job_resource"]
    assert changed["job_spec"]["clusterSelector"] == {"ray.io/cluster": changed["cluster"]}


def test_editing_the_benchmark_changes_nothing_on_the_cluster(first, edited_trainer):
    edited_trainer("bench.py")
    assert deployed() == first


def test_changed_image_is_a_new_cluster_and_job_that_resume_the_same_run(first):
    changed = deployed(**{"training.image": "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.3"})
    assert changed["cluster"] != first["cluster"] and changed["job"] != first["job"]
    assert changed["run"] == first["run"]  # same storage folder: the new job resumes from its checkpoints


def test_changed_deadline_updates_the_job_in_place(first):
    changed = deployed(**{"training.active_deadline_seconds": 7200})
    assert (changed["job"], changed["run"], changed["job_resource"]) == (first["job"], first["run"], first["job_resource"])
    assert changed["job_spec"]["activeDeadlineSeconds"] == 7200


def test_more_gpu_nodes_is_a_new_cluster_job_and_run(first):
    changed = deployed(gpu_node_count=4)
    assert changed["cluster"] != first["cluster"] and changed["run"] != first["run"]
    assert "--workers=16" in json.dumps(changed["job_spec"]["entrypoint"])


@pytest.mark.parametrize("name", ["cluster", "job", "run"])
def test_names_fit_kuberay_limits(first, name):
    from cdk_constructs.kuberay_rules import MAX_RAY_CLUSTER_NAME, MAX_RAY_JOB_NAME, is_dns1035_label

    limit = {"cluster": MAX_RAY_CLUSTER_NAME, "job": MAX_RAY_JOB_NAME, "run": MAX_RAY_JOB_NAME}[name]
    assert len(first[name]) <= limit and is_dns1035_label(first[name])
