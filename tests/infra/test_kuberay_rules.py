"""KubeRay v1.7's controller rules (cdk_constructs/kuberay_rules.py): our manifests pass, and each
rule fires on a manifest that breaks it, naming the Go function of validation.go it comes from."""

from __future__ import annotations

import copy

import pytest

from cdk_constructs import kuberay_rules as kr
from cdk_constructs import ray_manifests as rm
from tests.conftest import synth_stack


def cluster_of(job: dict) -> dict:
    """The RayCluster KubeRay makes from a RayJob's rayClusterSpec (rayjob_controller.go
    constructRayClusterForRayJob: named after the job plus 5 random characters, GenerateRayClusterName)."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": job["metadata"]["name"] + "-x7k2p", "namespace": job["metadata"]["namespace"],
                         "labels": {"ray.io/originated-from-crd": "RayJob"}},
            "spec": copy.deepcopy(job["spec"]["rayClusterSpec"])}


@pytest.fixture(scope="module")
def synthesized():
    """Our RayJob and the RayCluster KubeRay makes from it, from the same pure functions the workload construct calls."""
    spec = rm.RayClusterSpec(image="public.ecr.aws/x/ray:2.58.0", service_account="ray",
                             trainer_files={"training/train.py": "print(1)"}, worker_replicas=2, gpus_per_worker=4,
                             efa_per_worker=1, cpu_per_worker=40, memory_gib_per_worker=160, region="us-east-2")
    job = rm.ray_job_manifest(rm.RayJobSpec(namespace="training", cluster=spec,
                                            trainer_options={"model": "tiny", "workers": 8}, storage_path="s3://b/runs"))
    return [cluster_of(job), job]


def test_our_cluster_and_job_pass_every_rule(synthesized):
    assert kr.violations(synthesized) == []


def test_the_synthesized_stacks_job_passes_every_rule():
    job = synth_stack().training.ray_job_manifest
    assert kr.violations([job, cluster_of(job)]) == []


def test_p5_variant_passes_every_rule():
    job = synth_stack(gpu_instance_type="p5.48xlarge", gpu_node_count=4).training.ray_job_manifest
    assert kr.violations([job, cluster_of(job)]) == []


def test_backoff_limit_is_allowed_on_a_job_that_owns_its_cluster(synthesized):
    """ValidateRayJobSpec refuses backoffLimit > 0 only in clusterSelector mode."""
    job = _job(synthesized)
    assert job["spec"]["backoffLimit"] == 1 and "clusterSelector" not in job["spec"]
    assert kr.ray_job_violations(job) == []


def _cluster(synthesized) -> dict:
    return copy.deepcopy(synthesized[0])


def _job(synthesized) -> dict:
    return copy.deepcopy(synthesized[1])


def _selector(j: dict) -> dict:
    """The job turned into a clusterSelector job (the mode this project used before)."""
    j["spec"].pop("rayClusterSpec")
    j["spec"]["clusterSelector"] = {"ray.io/cluster": "fsdp-0123456789"}
    return j


def _no_shutdown(j: dict) -> dict:
    j["spec"].update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=0)
    return j


def _head(cluster: dict) -> dict:
    return cluster["spec"]["headGroupSpec"]


def _worker(cluster: dict) -> dict:
    return cluster["spec"]["workerGroupSpecs"][0]


def _head_env(cluster: dict, name: str, value: str) -> None:
    _head(cluster)["template"]["spec"]["containers"][0]["env"].append({"name": name, "value": value})


# (what breaks the RayCluster, the Go function, a fragment of the message)
CLUSTER_CASES = {
    "name too long": (lambda c: c["metadata"].update(name="a" * 54), "ValidateRayClusterMetadata", "at most 53"),
    "name not DNS-1035": (lambda c: c["metadata"].update(name="9fsdp"), "ValidateRayClusterMetadata", "DNS-1035"),
    "name with upper case": (lambda c: c["metadata"].update(name="Fsdp"), "ValidateRayClusterMetadata", "DNS-1035"),
    "upgrade strategy value": (lambda c: c["spec"].update(upgradeStrategy={"type": "Rolling"}),
                               "ValidateRayClusterUpgradeOptions", "Recreate or None"),
    "upgrade strategy on a RayJob's cluster": (
        lambda c: (c["spec"].update(upgradeStrategy={"type": "Recreate"}),
                   c["metadata"].setdefault("labels", {}).update({kr.ORIGINATED_FROM_CRD_LABEL: "RayJob"})),
        "ValidateRayClusterUpgradeOptions", "created by RayJob"),
    "head without container": (lambda c: _head(c)["template"]["spec"].update(containers=[]),
                               "ValidateRayClusterSpec", "headGroupSpec has no container"),
    "worker without container": (lambda c: _worker(c)["template"]["spec"].update(containers=[]),
                                 "ValidateRayClusterSpec", "has no container"),
    "resources twice on the head": (lambda c: _head(c).update(resources={"CPU": "1"}),
                                    "validateRayGroupResources", "Head group sets resources both"),
    "resources twice on a worker": (lambda c: _worker(c).update(resources={"GPU": "4"}),
                                    "validateRayGroupResources", "gpu group sets resources both"),
    "labels in rayStartParams": (lambda c: _worker(c)["rayStartParams"].update(labels="a=b"),
                                 "validateRayGroupLabels", "rayStartParams['labels']"),
    "bad label key": (lambda c: _worker(c).update(labels={"-bad": "x"}), "validateRayGroupLabels", "invalid label key"),
    "bad label value": (lambda c: _head(c).update(labels={"ok": "no spaces allowed"}),
                        "validateRayGroupLabels", "invalid label value"),
    "replicas unset without autoscaler": (lambda c: _worker(c).pop("maxReplicas"),
                                          "ValidateRayClusterSpec", "must set minReplicas and maxReplicas"),
    "negative minReplicas": (lambda c: _worker(c).update(minReplicas=-1, maxReplicas=2),
                             "ValidateRayClusterSpec", "negative minReplicas"),
    "negative maxReplicas": (lambda c: _worker(c).update(minReplicas=0, maxReplicas=-1),
                             "ValidateRayClusterSpec", "negative maxReplicas"),
    "min above max": (lambda c: _worker(c).update(minReplicas=3, maxReplicas=2),
                      "ValidateRayClusterSpec", "greater than maxReplicas"),
    "negative idle timeout": (lambda c: _worker(c).update(idleTimeoutSeconds=-5),
                              "validateWorkerGroupIdleTimeout", "negative"),
    "idle timeout without autoscaler v2": (lambda c: _worker(c).update(idleTimeoutSeconds=60),
                                           "validateWorkerGroupIdleTimeout", "needs autoscaler v2"),
    "priority on old Ray": (lambda c: (_worker(c).update(priority=5), c["spec"].update(rayVersion="2.50.0")),
                            "validateWorkerGroupPriority", "2.56.0"),
    "priority without autoscaler v2": (lambda c: (_worker(c).update(priority=5), c["spec"].update(rayVersion="2.58.0")),
                                       "validateWorkerGroupPriority", "needs autoscaler v2"),
    "suspended worker group under the autoscaler": (
        lambda c: (_worker(c).update(suspend=True), c["spec"].update(enableInTreeAutoscaling=True)),
        "ValidateRayClusterSpec", "cannot be suspended with the autoscaler"),
    "ft annotation and options": (
        lambda c: (c["metadata"].update(annotations={kr.FT_ENABLED_ANNOTATION: "true"}),
                   c["spec"].update(gcsFaultToleranceOptions={"redisAddress": "redis:6379"})),
        "ValidateRayClusterSpec", "are both set"),
    "redis address without fault tolerance": (lambda c: _head_env(c, "RAY_REDIS_ADDRESS", "redis:6379"),
                                              "ValidateRayClusterSpec", "without gcsFaultToleranceOptions"),
    "redis password in rayStartParams": (
        lambda c: (c["spec"].update(gcsFaultToleranceOptions={"redisAddress": "r:6379"}),
                   _head(c)["rayStartParams"].update({"redis-password": "x"})),
        "ValidateRayClusterSpec", "redis-password"),
    "REDIS_PASSWORD env with fault tolerance": (
        lambda c: (c["spec"].update(gcsFaultToleranceOptions={"redisAddress": "r:6379"}), _head_env(c, "REDIS_PASSWORD", "x")),
        "ValidateRayClusterSpec", "REDIS_PASSWORD"),
    "external storage annotation with options": (
        lambda c: (c["spec"].update(gcsFaultToleranceOptions={"redisAddress": "r:6379"}),
                   c["metadata"].update(annotations={kr.EXTERNAL_STORAGE_NS_ANNOTATION: "ns"})),
        "ValidateRayClusterSpec", "external-storage-namespace"),
    "rocksdb backend without its gate": (
        lambda c: c["spec"].update(gcsFaultToleranceOptions={"backend": "rocksdb"}),
        "validateGcsFaultToleranceBackend", "GCSFaultToleranceEmbeddedStorage"),
    "storage with the redis backend": (
        lambda c: c["spec"].update(gcsFaultToleranceOptions={"redisAddress": "r:6379", "storage": {"size": "1Gi"}}),
        "validateGcsFaultToleranceBackend", "rocksdb backend only"),
    "redis username": (lambda c: _head(c)["rayStartParams"].update({"redis-username": "u"}),
                       "ValidateRayClusterSpec", "redis username"),
    "autoscaler v2 env without autoscaler": (lambda c: _head_env(c, "RAY_enable_autoscaler_v2", "true"),
                                             "ValidateRayClusterSpec", "enableInTreeAutoscaling is off"),
    "autoscaler version twice": (
        lambda c: (c["spec"].update(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"}),
                   _head_env(c, "RAY_enable_autoscaler_v2", "1")),
        "ValidateRayClusterSpec", "are both set"),
    "restart policy under autoscaler v2": (
        lambda c: (c["spec"].update(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"}),
                   _worker(c)["template"]["spec"].update(restartPolicy="Always")),
        "ValidateRayClusterSpec", "restartPolicy of gpu"),
    "negative autoscaler idle timeout": (lambda c: c["spec"].update(autoscalerOptions={"idleTimeoutSeconds": -1}),
                                         "ValidateRayClusterSpec", "idleTimeoutSeconds -1"),
    "autoscaler start command in env": (
        lambda c: c["spec"].update(autoscalerOptions={"env": [{"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": "x"}]}),
        "ValidateRayClusterSpec", "KUBERAY_GEN_AUTOSCALER_START_CMD"),
    "history server without its gate": (lambda c: c["spec"].update(historyServerOptions={}),
                                        "ValidateRayClusterSpec", "RayClusterHistoryServer"),
    "network policy without its gate": (lambda c: c["spec"].update(networkPolicy={}),
                                        "ValidateRayClusterSpec", "RayClusterNetworkPolicy"),
    "TLS without its gate": (lambda c: c["spec"].update(tlsOptions={}), "ValidateRayClusterSpec", "RayClusterMTLS"),
    "token auth without rayVersion": (lambda c: c["spec"].pop("rayVersion"),
                                      "ValidateRayClusterSpec", "needs rayVersion"),
    "token auth with a bad rayVersion": (lambda c: c["spec"].update(authOptions={"mode": "token"}, rayVersion="latest"),
                                         "ValidateRayClusterSpec", "is not a version"),
    "token auth on old Ray": (lambda c: c["spec"].update(authOptions={"mode": "token"}, rayVersion="2.51.1"),
                              "ValidateRayClusterSpec", "2.52.0 or later"),
    "k8s token auth on old Ray": (
        lambda c: c["spec"].update(authOptions={"mode": "token", "enableK8sTokenAuth": True}, rayVersion="2.54.0"),
        "ValidateRayClusterSpec", "2.55.0 or later"),
    "k8s token auth with a secret": (
        lambda c: c["spec"].update(authOptions={"mode": "token", "enableK8sTokenAuth": True, "secretName": "s"},
                                   rayVersion="2.58.0"),
        "ValidateRayClusterSpec", "secretName are both set"),
    "k8s token auth without token mode": (lambda c: c["spec"].update(authOptions={"enableK8sTokenAuth": True}),
                                          "ValidateRayClusterSpec", "needs authOptions.mode token"),
}


@pytest.mark.parametrize("case", CLUSTER_CASES)
def test_cluster_rule_fires(synthesized, case):
    breaks, rule, fragment = CLUSTER_CASES[case]
    cluster = _cluster(synthesized)
    breaks(cluster)
    found = [(r, m) for r, m in kr.ray_cluster_violations(cluster)]
    assert any(r == rule and fragment in m for r, m in found), found


RULES = [{"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED"}}]

JOB_CASES = {
    "name too long": (lambda j: j["metadata"].update(name="a" * 48), "ValidateRayJobMetadata", "at most 47"),
    "name not DNS-1035": (lambda j: j["metadata"].update(name="ft_run"), "ValidateRayJobMetadata", "DNS-1035"),
    "backoffLimit with clusterSelector": (lambda j: _selector(j)["spec"].update(backoffLimit=1),
                                          "ValidateRayJobSpec", "incompatible with clusterSelector"),
    "negative backoffLimit": (lambda j: j["spec"].update(backoffLimit=-1), "ValidateRayJobSpec", "is negative"),
    "backoffLimit in InteractiveMode": (lambda j: j["spec"].update(submissionMode="InteractiveMode", backoffLimit=1),
                                        "ValidateRayJobSpec", "incompatible with InteractiveMode"),
    "suspend without shutdown": (lambda j: _no_shutdown(j)["spec"].update(suspend=True),
                                 "ValidateRayJobSpec", "suspend needs shutdownAfterJobFinishes"),
    "suspend with clusterSelector": (lambda j: _selector(j)["spec"].update(suspend=True, backoffLimit=0),
                                     "ValidateRayJobSpec", "does not support suspend"),
    "negative ttl": (lambda j: j["spec"].update(ttlSecondsAfterFinished=-1), "ValidateRayJobSpec", "negative"),
    "ttl without shutdown": (lambda j: j["spec"].update(shutdownAfterJobFinishes=False),
                             "validateDeletionConfiguration", "needs shutdownAfterJobFinishes"),
    "no cluster at all": (lambda j: j["spec"].pop("rayClusterSpec"), "ValidateRayJobSpec", "one of rayClusterSpec or clusterSelector"),
    "empty cluster name": (lambda j: _selector(j)["spec"].update(clusterSelector={"ray.io/cluster": ""}),
                           "ValidateRayJobSpec", "must name a cluster"),
    "clusterSelector in SidecarMode": (lambda j: _selector(j)["spec"].update(submissionMode="SidecarMode"),
                                       "ValidateRayJobSpec", "not supported in SidecarMode"),
    "submitterConfig in SidecarMode": (lambda j: j["spec"].update(submissionMode="SidecarMode"),
                                       "ValidateRayJobSpec", "SidecarMode does not support submitterConfig"),
    "submitter template in SidecarMode": (
        lambda j: (j["spec"].pop("submitterConfig"), j["spec"].update(submissionMode="SidecarMode")),
        "ValidateRayJobSpec", "does not support submitterPodTemplate"),
    "submitter template without a container": (
        lambda j: j["spec"]["submitterPodTemplate"]["spec"].update(containers=[]),
        "getSubmitterTemplate", "no container for KubeRay to configure"),
    "submitter template restarting Always": (
        lambda j: j["spec"]["submitterPodTemplate"]["spec"].pop("restartPolicy"),
        "createNewK8sJob", "restartPolicy Always"),
    "unknown submission mode": (lambda j: j["spec"].update(submissionMode="Batch"), "ValidateRayJobSpec", "is not one of"),
    "zero deadline": (lambda j: j["spec"].update(activeDeadlineSeconds=0), "ValidateRayJobSpec", "activeDeadlineSeconds must be a positive"),
    "negative pre-running deadline": (lambda j: j["spec"].update(preRunningDeadlineSeconds=-3),
                                      "ValidateRayJobSpec", "preRunningDeadlineSeconds must be a positive"),
    "runtime env not YAML": (lambda j: j["spec"].update(runtimeEnvYAML="a: [b"), "ValidateRayJobSpec", "not YAML"),
    "k8s token auth on a RayJob's cluster": (
        lambda j: j["spec"]["rayClusterSpec"]["authOptions"].update(enableK8sTokenAuth=True),
        "ValidateRayJobSpec", "not supported for RayJob"),
    "embedded cluster spec is checked too": (
        lambda j: j["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"].update(containers=[]),
        "ValidateRayClusterSpec", "headGroupSpec has no container"),
    "empty deletion strategy": (
        lambda j: j["spec"].update(deletionStrategy={"deletionRules": []}),
        "validateDeletionConfiguration", "needs onSuccess and onFailure, or deletionRules"),
    "deletion rules with shutdown": (lambda j: j["spec"].update(deletionStrategy={"deletionRules": RULES}),
                                     "validateDeletionConfiguration", "are exclusive"),
    "legacy and rules together": (
        lambda j: _no_shutdown(j)["spec"].update(deletionStrategy={"onSuccess": {"policy": "DeleteSelf"}, "deletionRules": RULES}),
        "validateDeletionConfiguration", "deletionRules and onSuccess/onFailure are exclusive"),
    "legacy policy half set": (lambda j: j["spec"].update(deletionStrategy={"onSuccess": {"policy": "DeleteSelf"}}),
                               "validateLegacyDeletionPolicies", "both onSuccess and onFailure"),
    "legacy DeleteCluster in clusterSelector mode": (
        lambda j: _selector(j)["spec"].update(
            deletionStrategy={"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteSelf"}}),
        "validateLegacyDeletionPolicies", "cannot use DeleteCluster on success"),
    "shutdown with a DeleteNone policy": (
        lambda j: j["spec"].update(deletionStrategy={"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteNone"}}),
        "validateLegacyDeletionPolicies", "shutdownAfterJobFinishes with a DeleteNone policy"),
    "DeleteWorkers with autoscaling": (
        lambda j: (j["spec"]["rayClusterSpec"].update(enableInTreeAutoscaling=True), j["spec"].update(
            deletionStrategy={"onSuccess": {"policy": "DeleteWorkers"}, "onFailure": {"policy": "DeleteCluster"}})),
        "validateLegacyDeletionPolicies", "DeleteWorkers does not work with autoscaling"),
    "deletion rule with both conditions": (
        lambda j: _no_shutdown(j)["spec"].update(deletionStrategy={"deletionRules": [
            {"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}}]}),
        "validateDeletionRules", "exactly one of jobStatus"),
    "deletion rule deleting a selected cluster": (
        lambda j: _no_shutdown(_selector(j))["spec"].update(backoffLimit=0, deletionStrategy={"deletionRules": [
            {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}]}),
        "validateDeletionRules", "not supported in clusterSelector mode"),
    "duplicate deletion rule": (
        lambda j: _no_shutdown(j)["spec"].update(deletionStrategy={"deletionRules": [
            {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED"}},
            {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED", "ttlSeconds": 5}}]}),
        "validateDeletionRules", "duplicate DeleteSelf"),
    "negative rule ttl": (
        lambda j: _no_shutdown(j)["spec"].update(deletionStrategy={"deletionRules": [
            {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED", "ttlSeconds": -1}}]}),
        "validateDeletionRules", "ttlSeconds is negative"),
}


@pytest.mark.parametrize("case", JOB_CASES)
def test_job_rule_fires(synthesized, case):
    breaks, rule, fragment = JOB_CASES[case]
    job = _job(synthesized)
    breaks(job)
    found = kr.ray_job_violations(job)
    assert any(r == rule and fragment in m for r, m in found), found


def test_ttl_order_across_rules_is_checked():
    job = {"metadata": {"name": "j"}, "spec": {
        "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}}},
        "deletionStrategy": {"deletionRules": [
            {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 100}},
            {"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 10}}]}}}
    assert ("validateTTLConsistency", "for jobStatus SUCCEEDED: DeleteSelf TTL 10 must be >= DeleteCluster TTL 100") \
        in kr.ray_job_violations(job)


def test_deletion_strategy_refused_when_its_gate_is_off(synthesized):
    job = _job(synthesized)
    job["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "DeleteSelf"}, "onFailure": {"policy": "DeleteCluster"}}
    assert kr.ray_job_violations(job) == []  # on by default in v1.7 (Beta)
    assert kr.ray_job_violations(job, {"RayJobDeletionPolicy": False}) == [
        ("validateDeletionConfiguration", "deletionStrategy needs the RayJobDeletionPolicy feature gate")]


def test_suspended_worker_group_needs_the_deletion_policy_gate(synthesized):
    cluster = _cluster(synthesized)
    _worker(cluster)["suspend"] = True
    assert kr.ray_cluster_violations(cluster) == []
    assert kr.ray_cluster_violations(cluster, {"RayJobDeletionPolicy": False}) == [
        ("ValidateRayClusterSpec", "worker group gpu can be suspended only with the RayJobDeletionPolicy gate")]


def test_job_must_select_a_cluster_that_the_manifests_create(synthesized):
    job = _selector(_job(synthesized))
    job["spec"].update(backoffLimit=0)
    [violation] = kr.violations([job])
    assert violation.rule == "getOrCreateRayClusterInstance" and "'fsdp-0123456789'" in violation.message


def test_a_changed_cluster_under_the_same_job_name_is_ignored_by_kuberay(synthesized):
    before = _job(synthesized)
    after = _job(synthesized)
    assert kr.ignored_changes([before], [after]) == []
    after["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = 3
    [violation] = kr.ignored_changes([before], [after])
    assert (violation.rule, violation.name) == ("getOrCreateRayClusterInstance", before["metadata"]["name"])
    after["metadata"]["name"] += "-b"
    assert kr.ignored_changes([before], [after]) == []  # a new name is a new job, with a new cluster


def test_violation_line_names_object_and_go_function(synthesized):
    job = _selector(_job(synthesized))
    job["spec"]["clusterSelector"]["ray.io/cluster"] = synthesized[0]["metadata"]["name"]
    [violation] = kr.violations([synthesized[0], job])
    assert violation.line().startswith(f"RayJob {job['metadata']['name']}: backoffLimit 1 is incompatible")
    assert violation.line().endswith("[KubeRay v1.7 ValidateRayJobSpec]")


@pytest.mark.parametrize("key,ok", [
    ("app", True), ("ray.io/cluster", True), ("a/b/c", False), ("-x", False), ("Example.com/x", False),
    ("x" * 63, True), ("x" * 64, False), ("example.com/", False),
])
def test_label_key_rules(key, ok):
    assert kr.is_qualified_name(key) is ok


@pytest.mark.parametrize("text,parsed", [("2.58.0", (2, 58, 0)), ("v2.52", (2, 52)), ("2", None), ("latest", None)])
def test_generic_version_parsing(text, parsed):
    assert kr.parse_generic_version(text) == parsed


def test_construct_refuses_a_manifest_kuberay_would_refuse(monkeypatch):
    from cdk_constructs import ray_manifests

    original = ray_manifests.ray_job_manifest

    def with_selector(spec):
        manifest = original(spec)
        manifest["spec"]["clusterSelector"] = {"ray.io/cluster": "fsdp-0"}  # with backoffLimit 1: refused by KubeRay >= 1.6
        return manifest

    monkeypatch.setattr(ray_manifests, "ray_job_manifest", with_selector)
    with pytest.raises(ValueError, match=r"backoffLimit 1 is incompatible with clusterSelector mode .*ValidateRayJobSpec"):
        synth_stack()


# k8s.io/apimachinery/pkg/util/version (what validation.go's version.ParseGeneric(...).LessThan uses) compares
# component by component, a missing one counting as 0 (compareInternal: the longer version is bigger only if its
# extra components are not all zeros): "2.56" is 2.56.0, "2.100" is newer than "2.56.0".
@pytest.mark.parametrize("ray_version,token_ok,priority_ok", [
    ("2.52", True, False), ("2.52.0", True, False), ("2.51.9", False, False),
    ("2.56", True, True), ("2.56.0.0", True, True), ("2.100", True, True), ("v2.56.1", True, True),
])
def test_ray_versions_compare_as_kubernetes_versions_do(ray_version, token_ok, priority_ok):
    container = {"template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}}
    spec = {"rayVersion": ray_version, "authOptions": {"mode": "token"}, "enableInTreeAutoscaling": True,
            "autoscalerOptions": {"version": "v2"}, "headGroupSpec": container,
            "workerGroupSpecs": [{"groupName": "gpu", "priority": 1, "minReplicas": 0, "maxReplicas": 2, **container}]}
    rules = {rule for rule, _ in kr.ray_cluster_spec(spec, {}, kr.FEATURE_GATE_DEFAULTS)}
    assert ("ValidateRayClusterSpec" not in rules) is token_ok
    assert ("validateWorkerGroupPriority" not in rules) is priority_ok


# ------------------------------------------------------------------ every message in full (mutation testing: a
# fragment let a mangled message or an extra violation pass)

CLUSTER_MESSAGES = {
    'name too long': [
        ('ValidateRayClusterMetadata', 'name is 54 characters; at most 53'),
    ],
    'name not DNS-1035': [
        ('ValidateRayClusterMetadata', "name '9fsdp' is not a DNS-1035 label (a-z, 0-9, '-', starting with a letter)"),
    ],
    'name with upper case': [
        ('ValidateRayClusterMetadata', "name 'Fsdp' is not a DNS-1035 label (a-z, 0-9, '-', starting with a letter)"),
    ],
    'upgrade strategy value': [
        ('ValidateRayClusterUpgradeOptions', "upgradeStrategy.type 'Rolling' must be Recreate or None"),
        ('ValidateRayClusterUpgradeOptions', 'upgradeStrategy cannot be set on a RayCluster created by RayJob'),
    ],
    "upgrade strategy on a RayJob's cluster": [
        ('ValidateRayClusterUpgradeOptions', 'upgradeStrategy cannot be set on a RayCluster created by RayJob'),
    ],
    'head without container': [
        ('ValidateRayClusterSpec', 'headGroupSpec has no container'),
    ],
    'worker without container': [
        ('ValidateRayClusterSpec', 'worker group gpu has no container'),
    ],
    'resources twice on the head': [
        ('validateRayGroupResources', 'Head group sets resources both in rayStartParams and in resources; use one'),
    ],
    'resources twice on a worker': [
        ('validateRayGroupResources', 'gpu group sets resources both in rayStartParams and in resources; use one'),
    ],
    'labels in rayStartParams': [
        ('validateRayGroupLabels', "rayStartParams['labels'] is not supported for gpu group; use labels"),
    ],
    'bad label key': [
        ('validateRayGroupLabels', "invalid label key '-bad' in gpu group"),
    ],
    'bad label value': [
        ('validateRayGroupLabels', "invalid label value 'no spaces allowed' for 'ok' in Head group"),
    ],
    'replicas unset without autoscaler': [
        ('ValidateRayClusterSpec', 'worker group gpu must set minReplicas and maxReplicas when autoscaling is off'),
    ],
    'negative minReplicas': [
        ('ValidateRayClusterSpec', 'worker group gpu has negative minReplicas -1'),
    ],
    'negative maxReplicas': [
        ('ValidateRayClusterSpec', 'worker group gpu has negative maxReplicas -1'),
        ('ValidateRayClusterSpec', 'worker group gpu has minReplicas 0 greater than maxReplicas -1'),
    ],
    'min above max': [
        ('ValidateRayClusterSpec', 'worker group gpu has minReplicas 3 greater than maxReplicas 2'),
    ],
    'negative idle timeout': [
        ('validateWorkerGroupIdleTimeout', 'worker group gpu: idleTimeoutSeconds -5 is negative'),
    ],
    'idle timeout without autoscaler v2': [
        ('validateWorkerGroupIdleTimeout', 'worker group gpu: idleTimeoutSeconds needs autoscaler v2'),
    ],
    'priority on old Ray': [
        ('validateWorkerGroupPriority', 'worker group gpu: priority needs rayVersion 2.56.0 or later'),
        ('ValidateRayClusterSpec', 'authOptions.mode token needs Ray 2.52.0 or later, got 2.50.0'),
    ],
    'priority without autoscaler v2': [
        ('validateWorkerGroupPriority', 'worker group gpu: priority needs autoscaler v2'),
    ],
    'suspended worker group under the autoscaler': [
        ('ValidateRayClusterSpec', 'worker group gpu cannot be suspended with the autoscaler on'),
    ],
    'ft annotation and options': [
        ('ValidateRayClusterSpec', 'ray.io/ft-enabled annotation and gcsFaultToleranceOptions are both set'),
    ],
    'redis address without fault tolerance': [
        ('ValidateRayClusterSpec', 'RAY_REDIS_ADDRESS in the head enables GCS fault tolerance without gcsFaultToleranceOptions'),
    ],
    'redis password in rayStartParams': [
        ('ValidateRayClusterSpec', 'redis-password in rayStartParams conflicts with gcsFaultToleranceOptions'),
    ],
    'REDIS_PASSWORD env with fault tolerance': [
        ('ValidateRayClusterSpec', 'REDIS_PASSWORD in the head conflicts with gcsFaultToleranceOptions'),
    ],
    'external storage annotation with options': [
        ('ValidateRayClusterSpec', 'ray.io/external-storage-namespace annotation conflicts with gcsFaultToleranceOptions'),
    ],
    'rocksdb backend without its gate': [
        ('validateGcsFaultToleranceBackend', 'the rocksdb backend needs the GCSFaultToleranceEmbeddedStorage gate'),
    ],
    'storage with the redis backend': [
        ('validateGcsFaultToleranceBackend', 'gcsFaultToleranceOptions.storage applies to the rocksdb backend only'),
    ],
    'redis username': [
        ('ValidateRayClusterSpec', 'redis username belongs in gcsFaultToleranceOptions.redisUsername'),
    ],
    'autoscaler v2 env without autoscaler': [
        ('ValidateRayClusterSpec', 'RAY_enable_autoscaler_v2 is on while enableInTreeAutoscaling is off'),
    ],
    'autoscaler version twice': [
        ('ValidateRayClusterSpec', 'autoscalerOptions.version and RAY_enable_autoscaler_v2 are both set'),
    ],
    'restart policy under autoscaler v2': [
        ('ValidateRayClusterSpec', 'restartPolicy of gpu must be Never or unset with autoscaler v2'),
    ],
    'negative autoscaler idle timeout': [
        ('ValidateRayClusterSpec', 'autoscalerOptions.idleTimeoutSeconds -1 is negative'),
    ],
    'autoscaler start command in env': [
        ('ValidateRayClusterSpec', 'autoscalerOptions.env must not set KUBERAY_GEN_AUTOSCALER_START_CMD'),
    ],
    'history server without its gate': [
        ('ValidateRayClusterSpec', 'spec.historyServerOptions needs the RayClusterHistoryServer feature gate'),
    ],
    'network policy without its gate': [
        ('ValidateRayClusterSpec', 'spec.networkPolicy needs the RayClusterNetworkPolicy feature gate'),
    ],
    'TLS without its gate': [
        ('ValidateRayClusterSpec', 'spec.tlsOptions needs the RayClusterMTLS feature gate'),
    ],
    'token auth without rayVersion': [
        ('ValidateRayClusterSpec', 'authOptions.mode token needs rayVersion (2.52.0 or later)'),
    ],
    'token auth with a bad rayVersion': [
        ('ValidateRayClusterSpec', "authOptions.mode token: rayVersion 'latest' is not a version"),
    ],
    'token auth on old Ray': [
        ('ValidateRayClusterSpec', 'authOptions.mode token needs Ray 2.52.0 or later, got 2.51.1'),
    ],
    'k8s token auth on old Ray': [
        ('ValidateRayClusterSpec', 'authOptions.enableK8sTokenAuth needs Ray 2.55.0 or later, got 2.54.0'),
    ],
    'k8s token auth with a secret': [
        ('ValidateRayClusterSpec', 'authOptions.enableK8sTokenAuth and authOptions.secretName are both set'),
    ],
    'k8s token auth without token mode': [
        ('ValidateRayClusterSpec', 'authOptions.enableK8sTokenAuth needs authOptions.mode token'),
    ],
}


@pytest.mark.parametrize("case", CLUSTER_CASES)
def test_cluster_rule_reports_exactly_these_violations(synthesized, case):
    cluster = _cluster(synthesized)
    CLUSTER_CASES[case][0](cluster)
    assert kr.ray_cluster_violations(cluster) == CLUSTER_MESSAGES[case]


SELECTOR_BACKOFF = ("ValidateRayJobSpec", "backoffLimit 1 is incompatible with clusterSelector mode "
                                          "(retry submissions with submitterConfig.backoffLimit)")
JOB_MESSAGES = {
    'name too long': [
        ('ValidateRayJobMetadata', 'name is 48 characters; at most 47'),
    ],
    'name not DNS-1035': [
        ('ValidateRayJobMetadata', "name 'ft_run' is not a DNS-1035 label (a-z, 0-9, '-', starting with a letter)"),
    ],
    'backoffLimit with clusterSelector': [
        SELECTOR_BACKOFF,
    ],
    'negative backoffLimit': [
        ('ValidateRayJobSpec', 'backoffLimit -1 is negative'),
    ],
    'backoffLimit in InteractiveMode': [
        ('ValidateRayJobSpec', 'backoffLimit is incompatible with InteractiveMode'),
    ],
    'suspend without shutdown': [
        ('ValidateRayJobSpec', 'suspend needs shutdownAfterJobFinishes'),
    ],
    'suspend with clusterSelector': [
        ('ValidateRayJobSpec', 'clusterSelector mode does not support suspend'),
    ],
    'negative ttl': [
        ('ValidateRayJobSpec', 'ttlSecondsAfterFinished is negative'),
    ],
    'ttl without shutdown': [
        ('validateDeletionConfiguration', 'ttlSecondsAfterFinished needs shutdownAfterJobFinishes'),
    ],
    'no cluster at all': [
        ('ValidateRayJobSpec', 'set one of rayClusterSpec or clusterSelector'),
    ],
    'empty cluster name': [
        ('ValidateRayJobSpec', 'clusterSelector must name a cluster under ray.io/cluster'),
        SELECTOR_BACKOFF,
    ],
    'clusterSelector in SidecarMode': [
        ('ValidateRayJobSpec', 'clusterSelector is not supported in SidecarMode'),
        SELECTOR_BACKOFF,
        ('ValidateRayJobSpec', 'SidecarMode does not support submitterPodTemplate'),
        ('ValidateRayJobSpec', 'SidecarMode does not support submitterConfig'),
    ],
    'submitterConfig in SidecarMode': [
        ('ValidateRayJobSpec', 'SidecarMode does not support submitterPodTemplate'),
        ('ValidateRayJobSpec', 'SidecarMode does not support submitterConfig'),
    ],
    'submitter template in SidecarMode': [
        ('ValidateRayJobSpec', 'SidecarMode does not support submitterPodTemplate'),
    ],
    'submitter template without a container': [
        ('getSubmitterTemplate', 'submitterPodTemplate has no container for KubeRay to configure'),
    ],
    'submitter template restarting Always': [
        ('createNewK8sJob', "submitterPodTemplate restartPolicy Always: the submitter Job's pods must use Never or OnFailure"),
    ],
    'unknown submission mode': [
        ('ValidateRayJobSpec', "submissionMode 'Batch' is not one of K8sJobMode, HTTPMode, InteractiveMode, SidecarMode"),
    ],
    'zero deadline': [
        ('ValidateRayJobSpec', 'activeDeadlineSeconds must be a positive integer, got 0'),
    ],
    'negative pre-running deadline': [
        ('ValidateRayJobSpec', 'preRunningDeadlineSeconds must be a positive integer, got -3'),
    ],
    'runtime env not YAML': [
        ('ValidateRayJobSpec', 'runtimeEnvYAML is not YAML: while parsing a flow sequence'),
    ],
    "k8s token auth on a RayJob's cluster": [
        ('ValidateRayJobSpec', 'Kubernetes token auth is not supported for RayJob'),
    ],
    'embedded cluster spec is checked too': [
        ('ValidateRayClusterSpec', 'headGroupSpec has no container'),
    ],
    'empty deletion strategy': [
        ('validateDeletionConfiguration', 'deletionStrategy needs onSuccess and onFailure, or deletionRules'),
    ],
    'deletion rules with shutdown': [
        ('validateDeletionConfiguration', 'shutdownAfterJobFinishes and deletionStrategy.deletionRules are exclusive'),
    ],
    'legacy and rules together': [
        ('validateDeletionConfiguration', 'deletionRules and onSuccess/onFailure are exclusive'),
    ],
    'legacy policy half set': [
        ('validateLegacyDeletionPolicies', 'deletionStrategy needs both onSuccess and onFailure'),
    ],
    'legacy DeleteCluster in clusterSelector mode': [
        ('validateLegacyDeletionPolicies', 'clusterSelector mode cannot use DeleteCluster on success'),
        SELECTOR_BACKOFF,
    ],
    'shutdown with a DeleteNone policy': [
        ('validateLegacyDeletionPolicies', 'shutdownAfterJobFinishes with a DeleteNone policy'),
    ],
    'DeleteWorkers with autoscaling': [
        ('validateLegacyDeletionPolicies', 'DeleteWorkers does not work with autoscaling'),
    ],
    'deletion rule with both conditions': [
        ('validateDeletionRules', 'deletionRules[0]: set exactly one of jobStatus and jobDeploymentStatus'),
    ],
    'deletion rule deleting a selected cluster': [
        ('validateDeletionRules', 'deletionRules[0]: DeleteCluster is not supported in clusterSelector mode'),
    ],
    'duplicate deletion rule': [
        ('validateDeletionRules', 'deletionRules[1]: duplicate DeleteSelf rule for jobStatus FAILED'),
    ],
    'negative rule ttl': [
        ('validateDeletionRules', 'deletionRules[0]: ttlSeconds is negative'),
    ],
}


@pytest.mark.parametrize("case", JOB_CASES)
def test_job_rule_reports_exactly_these_violations(synthesized, case):
    job = _job(synthesized)
    JOB_CASES[case][0](job)
    assert kr.ray_job_violations(job) == JOB_MESSAGES[case]


# ------------------------------------------------------------------ the edges of each rule

@pytest.mark.parametrize("check,longest", [(kr.is_dns1035_label, 63), (kr.is_dns1123_label, 63),
                                           (kr.is_valid_label_value, 63)])
def test_names_and_label_values_are_at_most_63_characters(check, longest):
    assert check("a" * longest) and not check("a" * (longest + 1))


@pytest.mark.parametrize("key,ok", [
    ("a/b", True), ("/b", False), ("x", True),
    # a DNS subdomain prefix of 253 characters (labels of 63, 63, 63 and 61, joined by 3 dots), and one of 254
    (".".join(["a" * 63] * 3 + ["a" * 61]) + "/x", True), (".".join(["a" * 63] * 3 + ["a" * 62]) + "/x", False),
])
def test_label_key_prefix_and_name_lengths(key, ok):
    assert kr.is_qualified_name(key) is ok


@pytest.mark.parametrize("make,limit", [("cluster", 53), ("job", 47)])
def test_a_name_of_exactly_the_limit_passes(synthesized, make, limit):
    manifest = _cluster(synthesized) if make == "cluster" else _job(synthesized)
    manifest["metadata"]["name"] = "a" * limit
    check = kr.ray_cluster_violations if make == "cluster" else kr.ray_job_violations
    assert check(manifest) == []


@pytest.mark.parametrize("make", ["cluster", "job"])
def test_a_missing_name_is_refused_as_empty(synthesized, make):
    manifest = _cluster(synthesized) if make == "cluster" else _job(synthesized)
    del manifest["metadata"]["name"]
    check = kr.ray_cluster_violations if make == "cluster" else kr.ray_job_violations
    rule = "ValidateRayClusterMetadata" if make == "cluster" else "ValidateRayJobMetadata"
    assert check(manifest) == [(rule, "name '' is not a DNS-1035 label (a-z, 0-9, '-', starting with a letter)")]


@pytest.mark.parametrize("kind", ["Recreate", "None"])
def test_upgrade_strategies_kuberay_accepts(synthesized, kind):
    cluster = _cluster(synthesized)
    cluster["metadata"]["labels"].pop(kr.ORIGINATED_FROM_CRD_LABEL)
    cluster["spec"]["upgradeStrategy"] = {"type": kind}
    assert kr.ray_cluster_violations(cluster) == []


def test_upgrade_strategy_on_a_rayservices_cluster_is_refused(synthesized):
    cluster = _cluster(synthesized)
    cluster["metadata"]["labels"][kr.ORIGINATED_FROM_CRD_LABEL] = "RayService"
    cluster["spec"]["upgradeStrategy"] = {"type": "Recreate"}
    assert kr.ray_cluster_violations(cluster) == [
        ("ValidateRayClusterUpgradeOptions", "upgradeStrategy cannot be set on a RayCluster created by RayService")]


def test_a_template_without_a_pod_spec_is_a_group_without_a_container(synthesized):
    cluster = _cluster(synthesized)
    cluster["spec"].update(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"})
    _head(cluster)["template"] = {}
    _worker(cluster)["template"] = {}
    assert kr.ray_cluster_violations(cluster) == [("ValidateRayClusterSpec", "headGroupSpec has no container"),
                                                  ("ValidateRayClusterSpec", "worker group gpu has no container")]


def test_zero_replicas_and_a_zero_idle_timeout_are_allowed(synthesized):
    cluster = _cluster(synthesized)
    cluster["spec"].update(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2", "idleTimeoutSeconds": 0})
    _worker(cluster).update(minReplicas=0, maxReplicas=0, idleTimeoutSeconds=0)
    assert kr.ray_cluster_violations(cluster) == []


def test_autoscaler_v2_is_the_version_option_only_with_the_autoscaler_on(synthesized):
    cluster = _cluster(synthesized)
    cluster["spec"]["autoscalerOptions"] = {"version": "v2"}  # enableInTreeAutoscaling unset: no autoscaler at all
    _worker(cluster)["idleTimeoutSeconds"] = 60
    assert kr.ray_cluster_violations(cluster) == [
        ("validateWorkerGroupIdleTimeout", "worker group gpu: idleTimeoutSeconds needs autoscaler v2")]


@pytest.mark.parametrize("value", ["1", "true"])
def test_autoscaler_v2_by_the_heads_environment(synthesized, value):
    """validation.go's IsAutoscalingV2Enabled: the version option, or RAY_enable_autoscaler_v2 "1"/"true" on the head."""
    cluster = _cluster(synthesized)
    cluster["spec"]["enableInTreeAutoscaling"] = True
    _head_env(cluster, "RAY_enable_autoscaler_v2", value)
    _worker(cluster)["idleTimeoutSeconds"] = 60
    assert kr.ray_cluster_violations(cluster) == []


def test_autoscaler_v2_env_of_1_without_the_autoscaler_is_refused(synthesized):
    cluster = _cluster(synthesized)
    _head_env(cluster, "RAY_enable_autoscaler_v2", "1")
    assert kr.ray_cluster_violations(cluster) == [
        ("ValidateRayClusterSpec", "RAY_enable_autoscaler_v2 is on while enableInTreeAutoscaling is off")]


@pytest.mark.parametrize("group,policy,expected", [
    ("head", "Never", []), ("head", "Always", ["restartPolicy of head must be Never or unset with autoscaler v2"])])
def test_restart_policy_under_autoscaler_v2(synthesized, group, policy, expected):
    cluster = _cluster(synthesized)
    cluster["spec"].update(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"})
    _head(cluster)["template"]["spec"]["restartPolicy"] = policy
    assert kr.ray_cluster_violations(cluster) == [("ValidateRayClusterSpec", m) for m in expected]


def test_the_ft_annotation_alone_enables_fault_tolerance(synthesized):
    """ray.io/ft-enabled "true" without gcsFaultToleranceOptions: RAY_REDIS_ADDRESS is then expected, not refused."""
    cluster = _cluster(synthesized)
    cluster["metadata"]["annotations"] = {kr.FT_ENABLED_ANNOTATION: "true"}
    _head_env(cluster, "RAY_REDIS_ADDRESS", "redis:6379")
    assert kr.ray_cluster_violations(cluster) == []


@pytest.mark.parametrize("value, refused", [("false", True), ("", True), ("yes", True), ("True", False), ("TRUE", False)])
def test_only_an_ft_annotation_of_true_in_any_case_enables_fault_tolerance(synthesized, value, refused):
    """KubeRay v1.7.0's IsGCSFaultToleranceEnabled (utils/util.go): the annotation enables it when
    strings.ToLower(value) == "true"; any other value leaves RAY_REDIS_ADDRESS in the head refused."""
    cluster = _cluster(synthesized)
    cluster["metadata"]["annotations"] = {kr.FT_ENABLED_ANNOTATION: value}
    _head_env(cluster, "RAY_REDIS_ADDRESS", "redis:6379")
    expected = [("ValidateRayClusterSpec", "RAY_REDIS_ADDRESS in the head enables GCS fault tolerance without "
                                           "gcsFaultToleranceOptions")] if refused else []
    assert kr.ray_cluster_violations(cluster) == expected


@pytest.mark.parametrize("variable", ["RAY_REDIS_ADDRESS", "REDIS_USERNAME"])
def test_redis_variables_in_the_head_with_fault_tolerance_options(synthesized, variable):
    cluster = _cluster(synthesized)
    cluster["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "r:6379"}
    _head_env(cluster, variable, "x")
    expected = {"RAY_REDIS_ADDRESS": "RAY_REDIS_ADDRESS in the head conflicts with gcsFaultToleranceOptions",
                "REDIS_USERNAME": "redis username belongs in gcsFaultToleranceOptions.redisUsername"}[variable]
    assert kr.ray_cluster_violations(cluster) == [("ValidateRayClusterSpec", expected)]


def test_rocksdb_with_its_gate_refuses_every_redis_field(synthesized):
    cluster = _cluster(synthesized)
    cluster["spec"]["gcsFaultToleranceOptions"] = {
        "backend": "rocksdb", "redisAddress": "r:6379", "redisUsername": "u", "redisPassword": {"value": "p"},
        "externalStorageNamespace": "ns"}
    assert kr.ray_cluster_violations(cluster, {"GCSFaultToleranceEmbeddedStorage": True}) == [
        ("validateGcsFaultToleranceBackend", f"{field} cannot be set with the rocksdb backend")
        for field in ("redisAddress", "redisUsername", "redisPassword", "externalStorageNamespace")]


def test_token_auth_with_a_secret_alone_passes(synthesized):
    cluster = _cluster(synthesized)
    cluster["spec"]["authOptions"] = {"mode": "token", "secretName": "s"}
    assert kr.ray_cluster_violations(cluster) == []


def test_no_auth_options_pass(synthesized):
    cluster = _cluster(synthesized)
    cluster["spec"].pop("authOptions", None)
    assert kr.ray_cluster_violations(cluster) == []


def test_a_ttl_of_one_second_needs_shutdown(synthesized):
    job = _job(synthesized)
    job["spec"].update(shutdownAfterJobFinishes=False, ttlSecondsAfterFinished=1)
    assert kr.ray_job_violations(job) == [
        ("validateDeletionConfiguration", "ttlSecondsAfterFinished needs shutdownAfterJobFinishes")]


def test_on_failure_alone_is_a_half_set_legacy_policy(synthesized):
    job = _job(synthesized)
    job["spec"]["deletionStrategy"] = {"onFailure": {"policy": "DeleteSelf"}}
    assert kr.ray_job_violations(job) == [
        ("validateLegacyDeletionPolicies", "deletionStrategy needs both onSuccess and onFailure")]


def test_a_legacy_policy_missing_on_one_side(synthesized):
    job = _job(synthesized)
    job["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "DeleteSelf"}, "onFailure": {}}
    assert kr.ray_job_violations(job) == [
        ("validateLegacyDeletionPolicies", "deletionStrategy.onSuccess and onFailure each need a policy")]


def test_legacy_delete_workers_on_failure_in_clusterselector_mode(synthesized):
    job = _no_shutdown(_selector(_job(synthesized)))
    job["spec"].update(backoffLimit=0, deletionStrategy={"onSuccess": {"policy": "DeleteSelf"},
                                                         "onFailure": {"policy": "DeleteWorkers"}})
    assert kr.ray_job_violations(job) == [
        ("validateLegacyDeletionPolicies", "clusterSelector mode cannot use DeleteWorkers on failure")]


def test_legacy_delete_workers_without_autoscaling_passes(synthesized):
    job = _no_shutdown(_job(synthesized))
    job["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "DeleteWorkers"}, "onFailure": {"policy": "DeleteSelf"}}
    assert kr.ray_job_violations(job) == []


def test_every_deletion_rule_is_checked_after_a_bad_one(synthesized):
    job = _no_shutdown(_job(synthesized))
    job["spec"]["deletionStrategy"] = {"deletionRules": [
        {"policy": "DeleteSelf", "condition": {}},
        {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED", "ttlSeconds": -1}},
        {"policy": "DeleteSelf", "condition": {"jobDeploymentStatus": "Failed"}},
        {"policy": "DeleteSelf", "condition": {"jobDeploymentStatus": "Failed"}},
        {"policy": "DeleteCluster", "condition": {"jobDeploymentStatus": "Failed", "ttlSeconds": 5}}]}
    assert kr.ray_job_violations(job) == [
        ("validateDeletionRules", "deletionRules[0]: set exactly one of jobStatus and jobDeploymentStatus"),
        ("validateDeletionRules", "deletionRules[1]: ttlSeconds is negative"),
        ("validateDeletionRules", "deletionRules[3]: duplicate DeleteSelf rule for jobDeploymentStatus Failed"),
        ("validateTTLConsistency", "for jobDeploymentStatus Failed: DeleteSelf TTL 0 must be >= DeleteCluster TTL 5")]


def test_delete_workers_rules_with_a_selected_cluster_and_with_autoscaling(synthesized):
    selected = _no_shutdown(_selector(_job(synthesized)))
    selected["spec"].update(backoffLimit=0, deletionStrategy={"deletionRules": [
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "FAILED"}},
        {"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED", "ttlSeconds": -1}}]})  # checked too
    negative = ("validateDeletionRules", "deletionRules[1]: ttlSeconds is negative")
    assert kr.ray_job_violations(selected) == [
        ("validateDeletionRules", "deletionRules[0]: DeleteWorkers is not supported in clusterSelector mode"), negative]
    autoscaled = _no_shutdown(_job(synthesized))
    autoscaled["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    autoscaled["spec"]["deletionStrategy"] = selected["spec"]["deletionStrategy"]
    assert kr.ray_job_violations(autoscaled) == [
        ("validateDeletionRules", "deletionRules[0]: DeleteWorkers does not work with autoscaling"), negative]


def test_equal_ttls_across_deletion_rules_pass(synthesized):
    job = _no_shutdown(_job(synthesized))
    job["spec"]["deletionStrategy"] = {"deletionRules": [
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 10}},
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 10}},
        {"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 10}}]}
    assert kr.ray_job_violations(job) == []


def test_an_unset_ttl_counts_as_zero(synthesized):
    job = _no_shutdown(_job(synthesized))
    job["spec"]["deletionStrategy"] = {"deletionRules": [
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 5}},
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}]}
    assert kr.ray_job_violations(job) == [
        ("validateTTLConsistency", "for jobStatus SUCCEEDED: DeleteCluster TTL 0 must be >= DeleteWorkers TTL 5")]


def test_a_job_without_a_submission_mode_is_a_k8s_job(synthesized):
    job = _job(synthesized)
    job["spec"].pop("submissionMode", None)
    assert kr.ray_job_violations(job) == []
    job["spec"]["submitterPodTemplate"]["spec"].pop("restartPolicy")  # so K8sJobMode's template rule applies
    assert [rule for rule, _ in kr.ray_job_violations(job)] == ["createNewK8sJob"]


def test_suspend_with_shutdown_passes(synthesized):
    job = _job(synthesized)
    job["spec"]["suspend"] = True
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert kr.ray_job_violations(job) == []


def test_interactive_mode_allows_a_zero_backoff_limit(synthesized):
    job = _job(synthesized)
    job["spec"].update(submissionMode="InteractiveMode", backoffLimit=0)
    assert kr.ray_job_violations(job) == []


@pytest.mark.parametrize("policy,expected", [
    (None, []), ("Never", []),
    ("Always", [("ValidateRayJobSpec", "SidecarMode needs the head restartPolicy Never or unset")])])
def test_sidecar_mode_head_restart_policy(synthesized, policy, expected):
    job = _job(synthesized)
    job["spec"].pop("submitterPodTemplate")
    job["spec"].pop("submitterConfig")
    job["spec"]["submissionMode"] = "SidecarMode"
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head.pop("restartPolicy", None)
    if policy:
        head["restartPolicy"] = policy
    assert kr.ray_job_violations(job) == expected


def test_a_jobs_cluster_is_checked_with_the_gates_given(synthesized):
    job = _job(synthesized)
    job["spec"]["rayClusterSpec"]["networkPolicy"] = {}
    gate = ("ValidateRayClusterSpec", "spec.networkPolicy needs the RayClusterNetworkPolicy feature gate")
    assert kr.ray_job_violations(job) == [gate]
    assert kr.ray_job_violations(job, {"RayClusterNetworkPolicy": True}) == []


def test_a_jobs_annotations_reach_its_cluster_checks(synthesized):
    job = _job(synthesized)
    job["metadata"]["annotations"] = {kr.FT_ENABLED_ANNOTATION: "true"}
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head.setdefault("env", []).append({"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"})
    assert kr.ray_job_violations(job) == []


@pytest.mark.parametrize("field_name", ["activeDeadlineSeconds", "preRunningDeadlineSeconds"])
def test_a_deadline_of_one_second_passes(synthesized, field_name):
    job = _job(synthesized)
    job["spec"][field_name] = 1
    assert kr.ray_job_violations(job) == []


def test_violations_across_objects_in_full(synthesized):
    cluster = _cluster(synthesized)
    cluster["metadata"]["name"] = "a" * 54
    job = _selector(_job(synthesized))
    job["spec"].update(backoffLimit=0)
    assert kr.violations([cluster, job], {"RayJobDeletionPolicy": True}) == [
        kr.Violation("RayCluster", "a" * 54, "ValidateRayClusterMetadata", "name is 54 characters; at most 53"),
        kr.Violation("RayJob", job["metadata"]["name"], "getOrCreateRayClusterInstance",
                     "clusterSelector names RayCluster 'fsdp-0123456789', which these manifests do not create")]


def test_violations_pass_the_gates_on(synthesized):
    job = _job(synthesized)
    job["spec"]["deletionStrategy"] = {"onSuccess": {"policy": "DeleteSelf"}, "onFailure": {"policy": "DeleteCluster"}}
    assert kr.violations([job], {"RayJobDeletionPolicy": False}) == [
        kr.Violation("RayJob", job["metadata"]["name"], "validateDeletionConfiguration",
                     "deletionStrategy needs the RayJobDeletionPolicy feature gate")]


def test_a_nameless_manifest_is_reported_under_an_empty_name(synthesized):
    job = _job(synthesized)
    del job["metadata"]["name"]
    assert [v.name for v in kr.violations([job])] == [""]


def test_ignored_change_in_full(synthesized):
    before, after = _job(synthesized), _job(synthesized)
    after["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = 3
    assert kr.ignored_changes([before], [after]) == [
        kr.Violation("RayJob", before["metadata"]["name"], "getOrCreateRayClusterInstance",
                     "rayClusterSpec changed under the same name: KubeRay keeps the cluster it made")]
