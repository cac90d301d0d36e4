"""KubeRay v1.7's own admission rules for RayCluster and RayJob, applied to our manifests at synth.

The CRD schema is not the contract. KubeRay's controllers run these checks on every object they
reconcile (ray-operator/controllers/ray/utils/validation.go, called from validateRayJob in
rayjob_controller.go and from the RayCluster controller). The chart installs no admission webhook,
so `kubectl apply` and `cdk deploy` succeed while the controller marks a RayJob ValidationFailed
and submits nothing. Each rule below is ported in our own words and names the Go function it
comes from; rules that only apply behind a feature gate that is off are reached through the gate
rule, which refuses first.

Pure functions over manifests as dicts; `violations(manifests)` returns one line per broken rule.
"""

from __future__ import annotations

from cdk_constructs.kuberay_basics import (CLUSTER_SELECTOR_KEY, EXTERNAL_STORAGE_NS_ANNOTATION, FEATURE_GATE_DEFAULTS,
                                           FT_ENABLED_ANNOTATION, MAX_RAY_CLUSTER_NAME, MAX_RAY_JOB_NAME,
                                           ORIGINATED_FROM_CRD_LABEL, Violation, is_dns1035_label, is_dns1123_label,
                                           is_qualified_name, is_valid_label_value, parse_generic_version)
from cdk_constructs.kuberay_cluster_rules import ray_cluster_spec, ray_cluster_violations
from cdk_constructs.kuberay_job_rules import ray_job_spec, ray_job_violations

# The rules' API, whichever module of the split holds each.
__all__ = ["CLUSTER_SELECTOR_KEY", "EXTERNAL_STORAGE_NS_ANNOTATION", "FEATURE_GATE_DEFAULTS", "FT_ENABLED_ANNOTATION",
           "MAX_RAY_CLUSTER_NAME", "MAX_RAY_JOB_NAME", "ORIGINATED_FROM_CRD_LABEL", "Violation", "cluster_selector_targets",
           "ignored_changes", "is_dns1035_label", "is_dns1123_label", "is_qualified_name", "is_valid_label_value",
           "parse_generic_version", "ray_cluster_spec", "ray_cluster_violations", "ray_job_spec", "ray_job_violations",
           "violations"]


# ---------------------------------------------------------------- across objects


def cluster_selector_targets(manifests: list[dict]) -> list[Violation]:
    """rayjob_controller.go getOrCreateRayClusterInstance: a clusterSelector job waits for a
    RayCluster of that name in its namespace, which it never creates ("It must be created manually")."""
    clusters = {(m["metadata"].get("namespace"), m["metadata"]["name"]) for m in manifests if m.get("kind") == "RayCluster"}
    found = []
    for job in (m for m in manifests if m.get("kind") == "RayJob"):
        target = ((job.get("spec") or {}).get("clusterSelector") or {}).get(CLUSTER_SELECTOR_KEY)
        if target and (job["metadata"].get("namespace"), target) not in clusters:
            found.append(Violation("RayJob", job["metadata"]["name"], "getOrCreateRayClusterInstance",
                                   f"clusterSelector names RayCluster {target!r}, which these manifests do not create"))
    return found


def ignored_changes(before: list[dict], after: list[dict]) -> list[Violation]:
    """rayjob_controller.go getOrCreateRayClusterInstance: a RayJob whose cluster exists keeps it and logs
    "Disregard changes in RayClusterSpec of RayJob". A second deploy that changes a job's rayClusterSpec
    under the same name changes nothing on the cluster."""
    old = {(m["metadata"].get("namespace"), m["metadata"]["name"]): m for m in before if m.get("kind") == "RayJob"}
    found = []
    for job in (m for m in after if m.get("kind") == "RayJob"):
        previous = old.get((job["metadata"].get("namespace"), job["metadata"]["name"]))
        if previous and (previous.get("spec") or {}).get("rayClusterSpec") != (job.get("spec") or {}).get("rayClusterSpec"):
            found.append(Violation("RayJob", job["metadata"]["name"], "getOrCreateRayClusterInstance",
                                   "rayClusterSpec changed under the same name: KubeRay keeps the cluster it made"))
    return found


def violations(manifests: list[dict], gates: dict | None = None) -> list[Violation]:
    """Every rule KubeRay v1.7 applies to the RayClusters and RayJobs among these manifests."""
    found: list[Violation] = []
    for manifest in manifests:
        check = {"RayCluster": ray_cluster_violations, "RayJob": ray_job_violations}.get(manifest.get("kind"))
        if check:
            name = (manifest.get("metadata") or {}).get("name", "")
            found += [Violation(manifest["kind"], name, rule, message) for rule, message in check(manifest, gates)]
    return found + cluster_selector_targets(manifests)
