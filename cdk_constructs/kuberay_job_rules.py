"""KubeRay v1.7's rules for a RayJob (validation.go ValidateRayJobMetadata, ValidateRayJobSpec and what they call;
rayjob_controller.go for the submitter's template); see kuberay_rules.py."""

from __future__ import annotations

import yaml

from cdk_constructs.kuberay_basics import (CLUSTER_SELECTOR_KEY, FEATURE_GATE_DEFAULTS, MAX_RAY_JOB_NAME,
                                           SUBMISSION_MODES, autoscaling, is_dns1035_label)
from cdk_constructs.kuberay_cluster_rules import ray_cluster_spec


def ray_job_metadata(metadata: dict) -> list[tuple[str, str]]:
    name = metadata.get("name") or ""
    found = []
    if len(name) > MAX_RAY_JOB_NAME:
        found.append(("ValidateRayJobMetadata", f"name is {len(name)} characters; at most {MAX_RAY_JOB_NAME}"))
    if not is_dns1035_label(name):
        found.append(("ValidateRayJobMetadata", f"name {name!r} is not a DNS-1035 label (a-z, 0-9, '-', starting with a letter)"))
    return found


def _deletion(spec: dict, gates: dict) -> list[tuple[str, str]]:
    """validateDeletionConfiguration and what it calls."""
    shutdown, ttl = spec.get("shutdownAfterJobFinishes") is True, spec.get("ttlSecondsAfterFinished") or 0
    if not shutdown and ttl > 0:
        return [("validateDeletionConfiguration", "ttlSecondsAfterFinished needs shutdownAfterJobFinishes")]
    strategy = spec.get("deletionStrategy")
    if strategy is None:
        return []
    if not gates["RayJobDeletionPolicy"]:
        return [("validateDeletionConfiguration", "deletionStrategy needs the RayJobDeletionPolicy feature gate")]
    legacy = strategy.get("onSuccess") is not None or strategy.get("onFailure") is not None
    rules = strategy.get("deletionRules") or []
    if rules and shutdown:
        return [("validateDeletionConfiguration", "shutdownAfterJobFinishes and deletionStrategy.deletionRules are exclusive")]
    if rules and legacy:
        return [("validateDeletionConfiguration", "deletionRules and onSuccess/onFailure are exclusive")]
    if legacy:
        return _legacy_deletion(spec, strategy)
    if rules:
        return _deletion_rules(spec, rules)
    return [("validateDeletionConfiguration", "deletionStrategy needs onSuccess and onFailure, or deletionRules")]


def _legacy_deletion(spec: dict, strategy: dict) -> list[tuple[str, str]]:
    rule = "validateLegacyDeletionPolicies"
    success, failure = strategy.get("onSuccess"), strategy.get("onFailure")
    if success is None or failure is None:
        return [(rule, "deletionStrategy needs both onSuccess and onFailure")]
    if success.get("policy") is None or failure.get("policy") is None:
        return [(rule, "deletionStrategy.onSuccess and onFailure each need a policy")]
    policies = {"success": success["policy"], "failure": failure["policy"]}
    found = []
    if spec.get("clusterSelector"):
        found += [(rule, f"clusterSelector mode cannot use {p} on {when}") for when, p in policies.items()
                  if p in ("DeleteCluster", "DeleteWorkers")]
    if "DeleteWorkers" in policies.values() and autoscaling(spec.get("rayClusterSpec") or {}):
        found.append((rule, "DeleteWorkers does not work with autoscaling"))
    if spec.get("shutdownAfterJobFinishes") and "DeleteNone" in policies.values():
        found.append((rule, "shutdownAfterJobFinishes with a DeleteNone policy"))
    return found


_DELETION_ORDER = ("DeleteWorkers", "DeleteCluster", "DeleteSelf")


def _deletion_rules(spec: dict, rules: list[dict]) -> list[tuple[str, str]]:
    rule_name = "validateDeletionRules"
    found, by_condition = [], {}
    for i, rule in enumerate(rules):
        condition, policy = rule.get("condition") or {}, rule.get("policy")
        has_job, has_deployment = condition.get("jobStatus") is not None, condition.get("jobDeploymentStatus") is not None
        if has_job == has_deployment:
            found.append((rule_name, f"deletionRules[{i}]: set exactly one of jobStatus and jobDeploymentStatus"))
            continue
        if (condition.get("ttlSeconds") or 0) < 0:
            found.append((rule_name, f"deletionRules[{i}]: ttlSeconds is negative"))
            continue
        if spec.get("clusterSelector") and policy in ("DeleteCluster", "DeleteWorkers"):
            found.append((rule_name, f"deletionRules[{i}]: {policy} is not supported in clusterSelector mode"))
            continue
        if policy == "DeleteWorkers" and autoscaling(spec.get("rayClusterSpec") or {}):
            found.append((rule_name, f"deletionRules[{i}]: DeleteWorkers does not work with autoscaling"))
            continue
        key = ("jobStatus", condition["jobStatus"]) if has_job else ("jobDeploymentStatus", condition["jobDeploymentStatus"])
        ttls = by_condition.setdefault(key, {})
        if policy in ttls:
            found.append((rule_name, f"deletionRules[{i}]: duplicate {policy} rule for {key[0]} {key[1]}"))
            continue
        ttls[policy] = condition.get("ttlSeconds") or 0
    for (field_name, value), ttls in by_condition.items():
        ordered = [(p, ttls[p]) for p in _DELETION_ORDER if p in ttls]
        for (before, low), (after, high) in zip(ordered, ordered[1:]):
            if high < low:
                found.append(("validateTTLConsistency", f"for {field_name} {value}: {after} TTL {high} must be >= {before} TTL {low}"))
    return found


def ray_job_spec(spec: dict, annotations: dict, gates: dict) -> list[tuple[str, str]]:
    """ValidateRayJobSpec."""
    rule = "ValidateRayJobSpec"
    found = []
    mode = spec.get("submissionMode") or "K8sJobMode"
    selector = spec.get("clusterSelector") or {}
    backoff = spec.get("backoffLimit")
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        found.append((rule, "suspend needs shutdownAfterJobFinishes"))
    if (spec.get("ttlSecondsAfterFinished") or 0) < 0:
        found.append((rule, "ttlSecondsAfterFinished is negative"))
    found += _deletion(spec, gates)
    if spec.get("suspend") and selector:
        found.append((rule, "clusterSelector mode does not support suspend"))
    if spec.get("rayClusterSpec") is None and not selector:
        found.append((rule, "set one of rayClusterSpec or clusterSelector"))
    if selector:
        if not selector.get(CLUSTER_SELECTOR_KEY):
            found.append((rule, f"clusterSelector must name a cluster under {CLUSTER_SELECTOR_KEY}"))
        if mode == "SidecarMode":
            found.append((rule, "clusterSelector is not supported in SidecarMode"))
        if backoff is not None and backoff > 0:
            found.append((rule, f"backoffLimit {backoff} is incompatible with clusterSelector mode "
                                "(retry submissions with submitterConfig.backoffLimit)"))
    if mode == "InteractiveMode" and backoff is not None and backoff > 0:
        found.append((rule, "backoffLimit is incompatible with InteractiveMode"))
    if mode == "SidecarMode":
        if spec.get("submitterPodTemplate") is not None:
            found.append((rule, "SidecarMode does not support submitterPodTemplate"))
        if spec.get("submitterConfig") is not None:
            found.append((rule, "SidecarMode does not support submitterConfig"))
        head = ((spec.get("rayClusterSpec") or {}).get("headGroupSpec") or {})
        if (head.get("template") or {}).get("spec", {}).get("restartPolicy", "") not in ("", "Never"):
            found.append((rule, "SidecarMode needs the head restartPolicy Never or unset"))
    if spec.get("rayClusterSpec") is not None:
        cluster = spec["rayClusterSpec"]
        if (cluster.get("authOptions") or {}).get("enableK8sTokenAuth"):
            found.append((rule, "Kubernetes token auth is not supported for RayJob"))
        found += ray_cluster_spec(cluster, annotations, gates)
    try:
        yaml.safe_load(spec.get("runtimeEnvYAML") or "")
    except yaml.YAMLError as error:
        found.append((rule, f"runtimeEnvYAML is not YAML: {str(error).splitlines()[0]}"))
    for field_name in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if spec.get(field_name) is not None and spec[field_name] <= 0:
            found.append((rule, f"{field_name} must be a positive integer, got {spec[field_name]}"))
    if backoff is not None and backoff < 0:
        found.append((rule, f"backoffLimit {backoff} is negative"))
    if mode not in SUBMISSION_MODES:
        found.append((rule, f"submissionMode {mode!r} is not one of {', '.join(SUBMISSION_MODES)}"))
    if mode == "K8sJobMode":
        found += _submitter_template(spec.get("submitterPodTemplate"))
    return found


# A batch/v1 Job's pods may only use these restart policies (the Job API refuses Always, the pod default).
JOB_RESTART_POLICIES = ("Never", "OnFailure")


def _submitter_template(template: dict | None) -> list[tuple[str, str]]:
    """What KubeRay does with a submitterPodTemplate in K8sJobMode (rayjob_controller.go): getSubmitterTemplate
    configures the container at index 0 (it writes the `ray job submit` command, the dashboard address and the
    Ray token into it), and createNewK8sJob wraps the template in a batch/v1 Job, which the API server refuses
    unless its pods restart Never or OnFailure; the RayJob then waits, its submitter never created."""
    if template is None:
        return []  # KubeRay's default template (common/job.go GetSubmitterTemplate) passes both
    pod = template.get("spec") or {}
    found = []
    if not pod.get("containers"):
        found.append(("getSubmitterTemplate", "submitterPodTemplate has no container for KubeRay to configure"))
    policy = pod.get("restartPolicy") or "Always"
    if policy not in JOB_RESTART_POLICIES:
        found.append(("createNewK8sJob", f"submitterPodTemplate restartPolicy {policy}: the submitter Job's pods must "
                                         f"use {' or '.join(JOB_RESTART_POLICIES)}"))
    return found


def ray_job_violations(manifest: dict, gates: dict | None = None) -> list[tuple[str, str]]:
    gates = {**FEATURE_GATE_DEFAULTS, **(gates or {})}
    metadata = manifest.get("metadata") or {}
    return ray_job_metadata(metadata) + ray_job_spec(manifest.get("spec") or {}, metadata.get("annotations") or {}, gates)
