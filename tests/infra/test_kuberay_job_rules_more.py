"""cdk_constructs/kuberay_job_rules.py against KubeRay v1.7's validation.go (ValidateRayJobSpec,
validateDeletionConfiguration, validateLegacyDeletionPolicies, validateDeletionRules, validateTTLConsistency) and
rayjob_controller.go's submitter Job, each rule on both sides of its condition."""

from __future__ import annotations

import pytest

from cdk_constructs.kuberay_job_rules import ray_job_violations

CONTAINER = {"name": "ray", "image": "rayproject/ray:2.58.0"}


def job(**spec) -> dict:
    """A RayJob KubeRay accepts (its own fixed-size cluster, shut down when done), with the spec fields given;
    a field given as None is removed."""
    cluster = {"rayVersion": "2.58.0", "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [CONTAINER]}}},
               "workerGroupSpecs": [{"groupName": "gpu", "minReplicas": 2, "maxReplicas": 2, "rayStartParams": {},
                                     "template": {"spec": {"containers": [CONTAINER]}}}]}
    full = {"entrypoint": "python -m training.train", "rayClusterSpec": cluster, "shutdownAfterJobFinishes": True, **spec}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "ft-run", "namespace": "training"},
            "spec": {k: v for k, v in full.items() if v is not None}}


def autoscaled_cluster() -> dict:
    cluster = job()["spec"]["rayClusterSpec"]
    return {**cluster, "enableInTreeAutoscaling": True,
            "workerGroupSpecs": [{**cluster["workerGroupSpecs"][0], "minReplicas": 0}]}


def rules(manifest: dict, gates: dict | None = None) -> list[str]:
    return [rule for rule, _ in ray_job_violations(manifest, gates)]


def messages(manifest: dict, gates: dict | None = None) -> list[str]:
    return [message for _, message in ray_job_violations(manifest, gates)]


def test_the_base_job_passes():
    assert ray_job_violations(job()) == []


# ---------------------------------------------------------------- validateDeletionConfiguration


@pytest.mark.parametrize("shutdown,ttl,refused", [
    (True, 60, False), (False, 60, True), (None, 60, True), (False, 0, False), (None, None, False)])
def test_a_ttl_after_finishing_needs_shutdown_after_the_job_finishes(shutdown, ttl, refused):
    found = messages(job(shutdownAfterJobFinishes=shutdown, ttlSecondsAfterFinished=ttl))
    assert ("ttlSecondsAfterFinished needs shutdownAfterJobFinishes" in found) is refused


def test_an_empty_deletion_strategy_is_a_strategy_with_neither_form():
    # `DeletionStrategy == nil` is the only way to have none: {} is a strategy, and it names neither form.
    assert messages(job(shutdownAfterJobFinishes=None, deletionStrategy={})) == [
        "deletionStrategy needs onSuccess and onFailure, or deletionRules"]


def test_a_deletion_strategy_needs_its_gate_and_only_that_one():
    strategy = {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteCluster"}}
    manifest = job(shutdownAfterJobFinishes=None, deletionStrategy=strategy)
    assert messages(manifest, {"RayJobDeletionPolicy": False}) == [
        "deletionStrategy needs the RayJobDeletionPolicy feature gate"]
    assert messages(manifest, {"RayJobDeletionPolicy": True, "RayCronJob": False}) == []


RULE = {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 60}}


@pytest.mark.parametrize("shutdown,refused", [(True, True), (False, False), (None, False)])
def test_deletion_rules_exclude_shutdown_after_the_job_finishes(shutdown, refused):
    found = messages(job(shutdownAfterJobFinishes=shutdown, deletionStrategy={"deletionRules": [RULE]}))
    assert found == (["shutdownAfterJobFinishes and deletionStrategy.deletionRules are exclusive"] if refused else [])


@pytest.mark.parametrize("legacy", [{"onSuccess": {"policy": "DeleteCluster"}}, {"onFailure": {"policy": "DeleteCluster"}}])
def test_deletion_rules_exclude_either_legacy_field(legacy):
    found = messages(job(shutdownAfterJobFinishes=None, deletionStrategy={"deletionRules": [RULE], **legacy}))
    assert found == ["deletionRules and onSuccess/onFailure are exclusive"]


# ---------------------------------------------------------------- validateLegacyDeletionPolicies


def legacy(success: str | None, failure: str | None, **spec) -> dict:
    strategy = {"onSuccess": {"policy": success} if success else {}, "onFailure": {"policy": failure} if failure else {}}
    return job(shutdownAfterJobFinishes=spec.pop("shutdownAfterJobFinishes", None), deletionStrategy=strategy, **spec)


@pytest.mark.parametrize("success,failure", [("DeleteCluster", None), (None, "DeleteCluster")])
def test_each_legacy_policy_must_name_a_policy(success, failure):
    assert messages(legacy(success, failure)) == ["deletionStrategy.onSuccess and onFailure each need a policy"]


@pytest.mark.parametrize("success,failure,refused_on", [
    ("DeleteNone", "DeleteWorkers", ["failure"]), ("DeleteCluster", "DeleteNone", ["success"]),
    ("DeleteSelf", "DeleteNone", []), ("DeleteWorkers", "DeleteCluster", ["success", "failure"])])
def test_a_cluster_selector_job_may_not_delete_the_cluster_or_its_workers(success, failure, refused_on):
    manifest = legacy(success, failure, rayClusterSpec=None, clusterSelector={"ray.io/cluster": "shared"})
    policies = {"success": success, "failure": failure}
    assert messages(manifest) == [f"clusterSelector mode cannot use {policies[w]} on {w}" for w in refused_on]


@pytest.mark.parametrize("success,failure,autoscaled,refused", [
    ("DeleteWorkers", "DeleteCluster", True, True), ("DeleteCluster", "DeleteWorkers", True, True),
    ("DeleteWorkers", "DeleteWorkers", False, False), ("DeleteCluster", "DeleteCluster", True, False)])
def test_legacy_delete_workers_does_not_work_with_the_clusters_autoscaler(success, failure, autoscaled, refused):
    # IsAutoscalingEnabled(rayJob.Spec.RayClusterSpec): the cluster's enableInTreeAutoscaling, not the job's.
    manifest = legacy(success, failure, **({"rayClusterSpec": autoscaled_cluster()} if autoscaled else {}))
    assert messages(manifest) == (["DeleteWorkers does not work with autoscaling"] if refused else [])


@pytest.mark.parametrize("success,failure,refused", [
    ("DeleteNone", "DeleteCluster", True), ("DeleteCluster", "DeleteNone", True), ("DeleteCluster", "DeleteSelf", False)])
def test_shutdown_after_the_job_finishes_conflicts_with_delete_none_on_either_side(success, failure, refused):
    assert messages(legacy(success, failure, shutdownAfterJobFinishes=True)) == (
        ["shutdownAfterJobFinishes with a DeleteNone policy"] if refused else [])


# ---------------------------------------------------------------- validateDeletionRules, validateTTLConsistency


def with_rules(*deletion_rules: dict, **spec) -> dict:
    return job(shutdownAfterJobFinishes=None, deletionStrategy={"deletionRules": list(deletion_rules)}, **spec)


def rule(policy: str, ttl: int | None = 0, **condition) -> dict:
    return {"policy": policy, "condition": {**condition, **({} if ttl is None else {"ttlSeconds": ttl})}}


@pytest.mark.parametrize("condition,refused", [
    ({"jobStatus": "FAILED"}, False), ({"jobDeploymentStatus": "Failed"}, False),
    ({}, True), ({"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}, True)])
def test_a_deletion_rule_names_exactly_one_status(condition, refused):
    assert messages(with_rules(rule("DeleteCluster", **condition))) == (
        ["deletionRules[0]: set exactly one of jobStatus and jobDeploymentStatus"] if refused else [])


@pytest.mark.parametrize("ttl,refused", [(-1, True), (0, False), (None, False)])
def test_a_deletion_rules_ttl_is_not_negative(ttl, refused):
    assert messages(with_rules(rule("DeleteCluster", ttl, jobStatus="FAILED"))) == (
        ["deletionRules[0]: ttlSeconds is negative"] if refused else [])


@pytest.mark.parametrize("policy,refused", [("DeleteWorkers", True), ("DeleteCluster", True), ("DeleteSelf", False),
                                            ("DeleteNone", False)])
def test_a_cluster_selector_jobs_rules_may_not_delete_the_cluster_or_its_workers(policy, refused):
    manifest = with_rules(rule(policy, jobStatus="FAILED"), rayClusterSpec=None, clusterSelector={"ray.io/cluster": "c"})
    assert messages(manifest) == (
        [f"deletionRules[0]: {policy} is not supported in clusterSelector mode"] if refused else [])


@pytest.mark.parametrize("policy,autoscaled,refused", [
    ("DeleteWorkers", True, True), ("DeleteWorkers", False, False), ("DeleteCluster", True, False)])
def test_a_delete_workers_rule_does_not_work_with_the_clusters_autoscaler(policy, autoscaled, refused):
    manifest = with_rules(rule(policy, jobStatus="FAILED"), **({"rayClusterSpec": autoscaled_cluster()} if autoscaled else {}))
    assert messages(manifest) == (["deletionRules[0]: DeleteWorkers does not work with autoscaling"] if refused else [])


def test_two_rules_for_one_policy_and_status_are_a_duplicate_but_other_statuses_are_not():
    manifest = with_rules(rule("DeleteCluster", 60, jobStatus="FAILED"), rule("DeleteCluster", 30, jobStatus="SUCCEEDED"),
                          rule("DeleteCluster", 90, jobDeploymentStatus="Failed"), rule("DeleteCluster", 10, jobStatus="FAILED"))
    assert messages(manifest) == ["deletionRules[3]: duplicate DeleteCluster rule for jobStatus FAILED"]


def test_a_job_status_and_a_deployment_status_of_one_name_are_different_conditions():
    # KubeRay groups JobStatus and JobDeploymentStatus rules in separate maps.
    manifest = with_rules(rule("DeleteCluster", 60, jobStatus="Failed"), rule("DeleteCluster", 60, jobDeploymentStatus="Failed"))
    assert messages(manifest) == []


# TTLs are non-decreasing along DeleteWorkers, DeleteCluster, DeleteSelf (lower TTL deletes earlier), compared
# between consecutive policies present; an unset TTL is 0.
@pytest.mark.parametrize("ttls,expected", [
    ({"DeleteWorkers": 10, "DeleteCluster": 20, "DeleteSelf": 30}, []),
    ({"DeleteWorkers": 20, "DeleteCluster": 20, "DeleteSelf": 20}, []),
    ({"DeleteWorkers": 30, "DeleteCluster": 20}, ["DeleteCluster TTL 20 must be >= DeleteWorkers TTL 30"]),
    ({"DeleteCluster": 30, "DeleteSelf": 20}, ["DeleteSelf TTL 20 must be >= DeleteCluster TTL 30"]),
    ({"DeleteWorkers": 30, "DeleteSelf": 20}, ["DeleteSelf TTL 20 must be >= DeleteWorkers TTL 30"]),
    ({"DeleteWorkers": 30, "DeleteCluster": 10, "DeleteSelf": 20}, ["DeleteCluster TTL 10 must be >= DeleteWorkers TTL 30"]),
    ({"DeleteWorkers": 10, "DeleteCluster": 30, "DeleteSelf": 20}, ["DeleteSelf TTL 20 must be >= DeleteCluster TTL 30"]),
])
def test_deletion_ttls_follow_the_deletion_order(ttls, expected):
    manifest = with_rules(*(rule(policy, ttl, jobStatus="FAILED") for policy, ttl in ttls.items()))
    assert messages(manifest) == [f"for jobStatus FAILED: {e}" for e in expected]


def test_the_ttl_order_is_held_per_status():
    manifest = with_rules(rule("DeleteCluster", 60, jobStatus="FAILED"), rule("DeleteSelf", 30, jobStatus="SUCCEEDED"))
    assert messages(manifest) == []


# ---------------------------------------------------------------- ValidateRayJobSpec


@pytest.mark.parametrize("shutdown,refused", [(True, False), (False, True), (None, True)])
def test_a_suspended_job_must_shut_down_after_it_finishes(shutdown, refused):
    assert ("suspend needs shutdownAfterJobFinishes" in messages(job(suspend=True, shutdownAfterJobFinishes=shutdown))) is refused


@pytest.mark.parametrize("ttl,refused", [(-1, True), (0, False)])
def test_a_negative_ttl_after_finishing_is_refused(ttl, refused):
    assert ("ttlSecondsAfterFinished is negative" in messages(job(ttlSecondsAfterFinished=ttl))) is refused


SELECTOR = {"rayClusterSpec": None, "clusterSelector": {"ray.io/cluster": "shared"}}


@pytest.mark.parametrize("suspend,refused", [(True, True), (False, False)])
def test_a_cluster_selector_job_cannot_be_suspended(suspend, refused):
    assert ("clusterSelector mode does not support suspend" in messages(job(suspend=suspend, **SELECTOR))) is refused


def test_a_job_needs_its_own_cluster_or_a_selector():
    assert messages(job(rayClusterSpec=None)) == ["set one of rayClusterSpec or clusterSelector"]
    assert messages(job(**SELECTOR)) == []


@pytest.mark.parametrize("selector", [{"ray.io/cluster": ""}, {"app": "shared"}])
def test_a_cluster_selector_must_name_the_cluster(selector):
    assert messages(job(rayClusterSpec=None, clusterSelector=selector)) == [
        "clusterSelector must name a cluster under ray.io/cluster"]


@pytest.mark.parametrize("mode,refused", [("SidecarMode", True), ("HTTPMode", False), ("K8sJobMode", False)])
def test_a_cluster_selector_is_not_supported_in_sidecar_mode(mode, refused):
    assert ("clusterSelector is not supported in SidecarMode" in messages(job(submissionMode=mode, **SELECTOR))) is refused


@pytest.mark.parametrize("backoff,refused", [(1, True), (0, False), (None, False)])
def test_a_cluster_selector_job_takes_no_backoff_limit_above_zero(backoff, refused):
    assert any(m.startswith("backoffLimit 1 is incompatible with clusterSelector mode")
               for m in messages(job(backoffLimit=backoff, **SELECTOR))) is refused


@pytest.mark.parametrize("mode,backoff,refused", [
    ("InteractiveMode", 1, True), ("InteractiveMode", 0, False), ("HTTPMode", 1, False), ("K8sJobMode", 1, False)])
def test_interactive_mode_takes_no_backoff_limit_above_zero(mode, backoff, refused):
    found = messages(job(submissionMode=mode, backoffLimit=backoff))
    assert ("backoffLimit is incompatible with InteractiveMode" in found) is refused


@pytest.mark.parametrize("field_name,value,message", [
    ("submitterPodTemplate", {}, "SidecarMode does not support submitterPodTemplate"),
    ("submitterConfig", {}, "SidecarMode does not support submitterConfig"),
])
def test_sidecar_mode_takes_no_submitter_settings_even_empty(field_name, value, message):
    # validation.go checks != nil: an empty object counts.
    assert messages(job(submissionMode="SidecarMode", **{field_name: value})) == [message]


@pytest.mark.parametrize("policy,refused", [("Never", False), ("OnFailure", True), ("Always", True)])
def test_sidecar_mode_needs_the_head_to_restart_never_or_unset(policy, refused):
    manifest = job(submissionMode="SidecarMode")
    manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["restartPolicy"] = policy
    assert messages(manifest) == (["SidecarMode needs the head restartPolicy Never or unset"] if refused else [])


@pytest.mark.parametrize("auth,refused", [
    ({"mode": "token", "enableK8sTokenAuth": True}, True), ({"mode": "token", "enableK8sTokenAuth": False}, False),
    ({"mode": "token"}, False)])
def test_kubernetes_token_auth_is_not_supported_for_a_rayjob(auth, refused):
    manifest = job()
    manifest["spec"]["rayClusterSpec"]["authOptions"] = auth
    assert ("Kubernetes token auth is not supported for RayJob" in messages(manifest)) is refused


def test_the_jobs_annotations_reach_its_clusters_checks():
    # ValidateRayClusterSpec(rayJob.Spec.RayClusterSpec, rayJob.Annotations).
    manifest = job()
    manifest["spec"]["rayClusterSpec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    manifest["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    assert "ray.io/ft-enabled annotation and gcsFaultToleranceOptions are both set" in messages(manifest)


@pytest.mark.parametrize("text,refused", [("pip: [torch]\n", False), ("", False), ("pip: [torch\n", True)])
def test_the_runtime_env_must_be_yaml(text, refused):
    assert any(m.startswith("runtimeEnvYAML is not YAML") for m in messages(job(runtimeEnvYAML=text))) is refused


@pytest.mark.parametrize("field_name", ["activeDeadlineSeconds", "preRunningDeadlineSeconds"])
@pytest.mark.parametrize("value,refused", [(0, True), (-5, True), (1, False)])
def test_each_deadline_is_a_positive_integer(field_name, value, refused):
    assert messages(job(**{field_name: value})) == (
        [f"{field_name} must be a positive integer, got {value}"] if refused else [])


@pytest.mark.parametrize("backoff,refused", [(-1, True), (0, False), (3, False)])
def test_the_backoff_limit_is_not_negative(backoff, refused):
    assert messages(job(backoffLimit=backoff)) == ([f"backoffLimit {backoff} is negative"] if refused else [])


@pytest.mark.parametrize("mode,refused", [("K8sJobMode", False), ("HTTPMode", False), ("InteractiveMode", False),
                                          ("SidecarMode", False), ("K8sJob", True), ("k8sjobmode", True)])
def test_the_submission_mode_is_one_kuberay_knows(mode, refused):
    assert any(m.startswith(f"submissionMode {mode!r} is not one of") for m in messages(job(submissionMode=mode))) is refused


# ---------------------------------------------------------------- the submitter Job (K8sJobMode, the default)


@pytest.mark.parametrize("mode", [None, "K8sJobMode"])
@pytest.mark.parametrize("policy,refused", [("Never", False), ("OnFailure", False), ("Always", True), (None, True)])
def test_the_submitter_pods_restart_never_or_on_failure_unset_being_always(mode, policy, refused):
    # A batch/v1 Job's pod template must restart Never or OnFailure; a pod's default is Always.
    pod = {"containers": [CONTAINER], **({"restartPolicy": policy} if policy else {})}
    found = rules(job(submissionMode=mode, submitterPodTemplate={"spec": pod}))
    assert found == (["createNewK8sJob"] if refused else [])


@pytest.mark.parametrize("pod", [{"restartPolicy": "Never"}, {"restartPolicy": "Never", "containers": []}])
def test_the_submitter_template_needs_a_container_for_kuberay_to_configure(pod):
    assert rules(job(submitterPodTemplate={"spec": pod})) == ["getSubmitterTemplate"]


@pytest.mark.parametrize("mode", ["HTTPMode", "InteractiveMode"])
def test_only_k8s_job_mode_makes_a_submitter_job(mode):
    assert messages(job(submissionMode=mode, submitterPodTemplate={"spec": {"restartPolicy": "Always"}})) == []


# ---------------------------------------------------------------- ValidateRayJobMetadata


@pytest.mark.parametrize("name,refused", [("a" * 47, []), ("a" * 48, ["ValidateRayJobMetadata"]),
                                          ("1ft-run", ["ValidateRayJobMetadata"]), ("", ["ValidateRayJobMetadata"])])
def test_a_rayjobs_name_is_a_dns1035_label_of_at_most_47_characters(name, refused):
    manifest = job()
    manifest["metadata"]["name"] = name
    assert rules(manifest) == refused


def test_an_empty_submitter_template_is_used_as_given_not_replaced_by_the_default():
    # common.GetSubmitterTemplate takes SubmitterPodTemplate whenever it is not nil: {} has no container for
    # configureSubmitterContainer and restarts Always (the pod default), which the batch/v1 Job refuses.
    assert rules(job(submitterPodTemplate={})) == ["getSubmitterTemplate", "createNewK8sJob"]


def test_a_job_with_both_its_own_cluster_and_a_selector_is_in_selector_mode_and_cannot_be_suspended():
    # isClusterSelectorMode is len(ClusterSelector) != 0, whether or not rayClusterSpec is set too.
    found = messages(job(suspend=True, clusterSelector={"ray.io/cluster": "shared"}))
    assert "clusterSelector mode does not support suspend" in found


def test_an_empty_cluster_spec_is_a_cluster_spec_checked_as_one():
    # RayClusterSpec == nil is what "set one of" refuses; {} is a spec, and ValidateRayClusterSpec refuses it.
    found = messages(job(rayClusterSpec={}))
    assert "set one of rayClusterSpec or clusterSelector" not in found and "headGroupSpec has no container" in found
