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

import re
from dataclasses import dataclass

import yaml

# ray-operator/pkg/features/features.go at v1.7: Beta gates default on, Alpha gates default off.
FEATURE_GATE_DEFAULTS = {
    "RayClusterStatusConditions": True,
    "RayJobDeletionPolicy": True,
    "RayMultiHostIndexing": True,
    "RayServiceIncrementalUpgrade": True,
    "RayCronJob": False,
    "SidecarSubmitterRestart": False,
    "RayClusterNetworkPolicy": False,
    "GCSFaultToleranceEmbeddedStorage": False,
    "RayClusterMTLS": False,
    "RayClusterHistoryServer": False,
    "KubernetesWAS": False,
}

# utils/constant.go: a RayCluster's name is embedded in its head Service name, a RayJob's in
# the RayCluster and submitter Job it creates, so both are shorter than a DNS label.
MAX_RAY_CLUSTER_NAME = 53
MAX_RAY_JOB_NAME = 47
CLUSTER_SELECTOR_KEY = "ray.io/cluster"
ORIGINATED_FROM_CRD_LABEL = "ray.io/originated-from-crd"
FT_ENABLED_ANNOTATION = "ray.io/ft-enabled"
EXTERNAL_STORAGE_NS_ANNOTATION = "ray.io/external-storage-namespace"
SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
RAY_START_RESOURCE_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")
MIN_RAY_FOR_TOKEN_AUTH = (2, 52, 0)
MIN_RAY_FOR_K8S_TOKEN_AUTH = (2, 55, 0)
MIN_RAY_FOR_PRIORITY = (2, 56, 0)

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# k8s.io/apimachinery/pkg/util/version ParseGeneric: two or more dot-separated numbers.
_GENERIC_VERSION = re.compile(r"\s*v?(\d+(?:\.\d+)+)(.*)")


@dataclass(frozen=True)
class Violation:
    kind: str
    name: str
    rule: str
    """The Go function of validation.go (or rayjob_controller.go) the rule comes from."""
    message: str

    def line(self) -> str:
        return f"{self.kind} {self.name}: {self.message} [KubeRay v1.7 {self.rule}]"


# ---------------------------------------------------------------- Kubernetes name rules


def is_dns1035_label(name: str) -> bool:
    return len(name) <= 63 and _DNS1035.fullmatch(name) is not None


def is_dns1123_label(name: str) -> bool:
    return len(name) <= 63 and _DNS1123_LABEL.fullmatch(name) is not None


def is_qualified_name(key: str) -> bool:
    """A label key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name) is not None


def is_valid_label_value(value: str) -> bool:
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def parse_generic_version(text: str) -> tuple[int, ...] | None:
    match = _GENERIC_VERSION.fullmatch(text or "")
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def _at_least(version: tuple[int, ...], minimum: tuple[int, ...]) -> bool:
    width = max(len(version), len(minimum))
    return version + (0,) * (width - len(version)) >= minimum + (0,) * (width - len(minimum))


# ---------------------------------------------------------------- small readers


def _env(container: dict) -> dict[str, dict]:
    return {e.get("name"): e for e in container.get("env") or []}


def _ray_container(group: dict) -> dict:
    """KubeRay reads the Ray container at index 0 (RayContainerIndex)."""
    containers = (group.get("template") or {}).get("spec", {}).get("containers") or []
    return containers[0] if containers else {}


def _autoscaling(spec: dict) -> bool:
    return spec.get("enableInTreeAutoscaling") is True


def _autoscaling_v2(spec: dict) -> bool:
    return _autoscaling(spec) and (spec.get("autoscalerOptions") or {}).get("version") == "v2"


def _v2_env_on(spec: dict) -> bool:
    value = _env(_ray_container(spec.get("headGroupSpec") or {})).get("RAY_enable_autoscaler_v2", {}).get("value")
    return value in ("1", "true")


# ---------------------------------------------------------------- RayCluster


def ray_cluster_metadata(metadata: dict) -> list[tuple[str, str]]:
    name = metadata.get("name") or ""
    found = []
    if len(name) > MAX_RAY_CLUSTER_NAME:
        found.append(("ValidateRayClusterMetadata", f"name is {len(name)} characters; at most {MAX_RAY_CLUSTER_NAME}"))
    if not is_dns1035_label(name):
        found.append(("ValidateRayClusterMetadata", f"name {name!r} is not a DNS-1035 label (a-z, 0-9, '-', starting with a letter)"))
    return found


def ray_cluster_upgrade_options(manifest: dict) -> list[tuple[str, str]]:
    strategy = (manifest.get("spec") or {}).get("upgradeStrategy") or {}
    kind = strategy.get("type")
    found = []
    if kind is not None and kind not in ("Recreate", "None"):
        found.append(("ValidateRayClusterUpgradeOptions", f"upgradeStrategy.type {kind!r} must be Recreate or None"))
    creator = ((manifest.get("metadata") or {}).get("labels") or {}).get(ORIGINATED_FROM_CRD_LABEL)
    if kind is not None and creator in ("RayJob", "RayService"):
        found.append(("ValidateRayClusterUpgradeOptions", f"upgradeStrategy cannot be set on a RayCluster created by {creator}"))
    return found


def _group_resources(group_name: str, group: dict) -> list[tuple[str, str]]:
    params = group.get("rayStartParams") or {}
    if any(params.get(p) for p in RAY_START_RESOURCE_PARAMS) and group.get("resources"):
        return [("validateRayGroupResources",
                 f"{group_name} group sets resources both in rayStartParams and in resources; use one")]
    return []


def _group_labels(group_name: str, group: dict) -> list[tuple[str, str]]:
    found = []
    if "labels" in (group.get("rayStartParams") or {}):
        found.append(("validateRayGroupLabels", f"rayStartParams['labels'] is not supported for {group_name} group; use labels"))
    for key, value in (group.get("labels") or {}).items():
        if not is_qualified_name(key):
            found.append(("validateRayGroupLabels", f"invalid label key {key!r} in {group_name} group"))
        if not is_valid_label_value(str(value)):
            found.append(("validateRayGroupLabels", f"invalid label value {value!r} for {key!r} in {group_name} group"))
    return found


def _worker_group(spec: dict, group: dict, gates: dict) -> list[tuple[str, str]]:
    name = group.get("groupName", "")
    found = []
    if not (group.get("template") or {}).get("spec", {}).get("containers"):
        found.append(("ValidateRayClusterSpec", f"worker group {name} has no container"))
    low, high = group.get("minReplicas"), group.get("maxReplicas")
    if not _autoscaling(spec) and (low is None or high is None):
        found.append(("ValidateRayClusterSpec", f"worker group {name} must set minReplicas and maxReplicas when autoscaling is off"))
    if low is not None and low < 0:
        found.append(("ValidateRayClusterSpec", f"worker group {name} has negative minReplicas {low}"))
    if high is not None and high < 0:
        found.append(("ValidateRayClusterSpec", f"worker group {name} has negative maxReplicas {high}"))
    if low is not None and high is not None and low > high:
        found.append(("ValidateRayClusterSpec", f"worker group {name} has minReplicas {low} greater than maxReplicas {high}"))
    found += _group_resources(name, group) + _group_labels(name, group)
    idle = group.get("idleTimeoutSeconds")
    if idle is not None and idle < 0:
        found.append(("validateWorkerGroupIdleTimeout", f"worker group {name}: idleTimeoutSeconds {idle} is negative"))
    elif idle is not None and not (_autoscaling_v2(spec) or _v2_env_on(spec)):
        found.append(("validateWorkerGroupIdleTimeout", f"worker group {name}: idleTimeoutSeconds needs autoscaler v2"))
    if group.get("priority"):
        version = parse_generic_version(spec.get("rayVersion", ""))
        if version is None or not _at_least(version, MIN_RAY_FOR_PRIORITY):
            found.append(("validateWorkerGroupPriority", f"worker group {name}: priority needs rayVersion 2.56.0 or later"))
        elif not (_autoscaling_v2(spec) or _v2_env_on(spec)):
            found.append(("validateWorkerGroupPriority", f"worker group {name}: priority needs autoscaler v2"))
    if group.get("suspend") and not gates["RayJobDeletionPolicy"]:
        found.append(("ValidateRayClusterSpec", f"worker group {name} can be suspended only with the RayJobDeletionPolicy gate"))
    if group.get("suspend") and _autoscaling(spec):
        found.append(("ValidateRayClusterSpec", f"worker group {name} cannot be suspended with the autoscaler on"))
    return found


def _fault_tolerance(spec: dict, annotations: dict, gates: dict) -> list[tuple[str, str]]:
    head = spec.get("headGroupSpec") or {}
    params, env = head.get("rayStartParams") or {}, _env(_ray_container(head))
    options = spec.get("gcsFaultToleranceOptions")
    found = []
    if annotations.get(FT_ENABLED_ANNOTATION) and options is not None:
        found.append(("ValidateRayClusterSpec", f"{FT_ENABLED_ANNOTATION} annotation and gcsFaultToleranceOptions are both set"))
    ft_on = annotations.get(FT_ENABLED_ANNOTATION) == "true" or options is not None
    if not ft_on and "RAY_REDIS_ADDRESS" in env:
        found.append(("ValidateRayClusterSpec", "RAY_REDIS_ADDRESS in the head enables GCS fault tolerance without gcsFaultToleranceOptions"))
    if options is not None:
        if params.get("redis-password"):
            found.append(("ValidateRayClusterSpec", "redis-password in rayStartParams conflicts with gcsFaultToleranceOptions"))
        for variable in ("REDIS_PASSWORD", "RAY_REDIS_ADDRESS"):
            if variable in env:
                found.append(("ValidateRayClusterSpec", f"{variable} in the head conflicts with gcsFaultToleranceOptions"))
        if annotations.get(EXTERNAL_STORAGE_NS_ANNOTATION):
            found.append(("ValidateRayClusterSpec", f"{EXTERNAL_STORAGE_NS_ANNOTATION} annotation conflicts with gcsFaultToleranceOptions"))
        found += _fault_tolerance_backend(options, gates)
    if params.get("redis-username") or "REDIS_USERNAME" in env:
        found.append(("ValidateRayClusterSpec", "redis username belongs in gcsFaultToleranceOptions.redisUsername"))
    return found


def _fault_tolerance_backend(options: dict, gates: dict) -> list[tuple[str, str]]:
    if (options.get("backend") or "redis") != "rocksdb":
        if options.get("storage") is not None:
            return [("validateGcsFaultToleranceBackend", "gcsFaultToleranceOptions.storage applies to the rocksdb backend only")]
        return []
    if not gates["GCSFaultToleranceEmbeddedStorage"]:
        return [("validateGcsFaultToleranceBackend", "the rocksdb backend needs the GCSFaultToleranceEmbeddedStorage gate")]
    redis_only = [k for k in ("redisAddress", "redisUsername", "redisPassword", "externalStorageNamespace") if options.get(k)]
    return [("validateGcsFaultToleranceBackend", f"{k} cannot be set with the rocksdb backend") for k in redis_only]


def _autoscaler(spec: dict) -> list[tuple[str, str]]:
    head = spec.get("headGroupSpec") or {}
    env = _env(_ray_container(head))
    options = spec.get("autoscalerOptions") or {}
    found = []
    if not _autoscaling(spec) and env.get("RAY_enable_autoscaler_v2", {}).get("value") in ("1", "true"):
        found.append(("ValidateRayClusterSpec", "RAY_enable_autoscaler_v2 is on while enableInTreeAutoscaling is off"))
    if _autoscaling(spec) and options.get("version") is not None and "RAY_enable_autoscaler_v2" in env:
        found.append(("ValidateRayClusterSpec", "autoscalerOptions.version and RAY_enable_autoscaler_v2 are both set"))
    if _autoscaling_v2(spec):
        groups = [("head", head)] + [(g.get("groupName", ""), g) for g in spec.get("workerGroupSpecs") or []]
        for name, group in groups:
            policy = (group.get("template") or {}).get("spec", {}).get("restartPolicy", "")
            if policy not in ("", "Never"):
                found.append(("ValidateRayClusterSpec", f"restartPolicy of {name} must be Never or unset with autoscaler v2"))
    idle = options.get("idleTimeoutSeconds")
    if idle is not None and idle < 0:
        found.append(("ValidateRayClusterSpec", f"autoscalerOptions.idleTimeoutSeconds {idle} is negative"))
    if "KUBERAY_GEN_AUTOSCALER_START_CMD" in {e.get("name") for e in options.get("env") or []}:
        found.append(("ValidateRayClusterSpec", "autoscalerOptions.env must not set KUBERAY_GEN_AUTOSCALER_START_CMD"))
    return found


def _auth(spec: dict) -> list[tuple[str, str]]:
    options = spec.get("authOptions") or {}
    token, k8s_auth = options.get("mode") == "token", options.get("enableK8sTokenAuth") is True
    if not token:
        return [("ValidateRayClusterSpec", "authOptions.enableK8sTokenAuth needs authOptions.mode token")] if k8s_auth else []
    version = parse_generic_version(spec.get("rayVersion", ""))
    if not spec.get("rayVersion"):
        return [("ValidateRayClusterSpec", "authOptions.mode token needs rayVersion (2.52.0 or later)")]
    if version is None:
        return [("ValidateRayClusterSpec", f"authOptions.mode token: rayVersion {spec['rayVersion']!r} is not a version")]
    if not _at_least(version, MIN_RAY_FOR_TOKEN_AUTH):
        return [("ValidateRayClusterSpec", f"authOptions.mode token needs Ray 2.52.0 or later, got {spec['rayVersion']}")]
    found = []
    if k8s_auth and not _at_least(version, MIN_RAY_FOR_K8S_TOKEN_AUTH):
        found.append(("ValidateRayClusterSpec", f"authOptions.enableK8sTokenAuth needs Ray 2.55.0 or later, got {spec['rayVersion']}"))
    if k8s_auth and options.get("secretName"):
        found.append(("ValidateRayClusterSpec", "authOptions.enableK8sTokenAuth and authOptions.secretName are both set"))
    return found


def _gated_options(spec: dict, gates: dict) -> list[tuple[str, str]]:
    found = []
    for field_name, gate in (("historyServerOptions", "RayClusterHistoryServer"),
                             ("networkPolicy", "RayClusterNetworkPolicy"),
                             ("tlsOptions", "RayClusterMTLS")):
        if spec.get(field_name) is not None and not gates[gate]:
            found.append(("ValidateRayClusterSpec", f"spec.{field_name} needs the {gate} feature gate"))
    return found


def ray_cluster_spec(spec: dict, annotations: dict, gates: dict) -> list[tuple[str, str]]:
    """ValidateRayClusterSpec and the helpers it calls."""
    head = spec.get("headGroupSpec") or {}
    found = []
    if not (head.get("template") or {}).get("spec", {}).get("containers"):
        found.append(("ValidateRayClusterSpec", "headGroupSpec has no container"))
    found += _group_resources("Head", head) + _group_labels("Head", head)
    for group in spec.get("workerGroupSpecs") or []:
        found += _worker_group(spec, group, gates)
    found += _fault_tolerance(spec, annotations, gates)
    found += _autoscaler(spec) + _auth(spec) + _gated_options(spec, gates)
    return found


def ray_cluster_violations(manifest: dict, gates: dict | None = None) -> list[tuple[str, str]]:
    gates = {**FEATURE_GATE_DEFAULTS, **(gates or {})}
    metadata = manifest.get("metadata") or {}
    return (ray_cluster_metadata(metadata) + ray_cluster_upgrade_options(manifest)
            + ray_cluster_spec(manifest.get("spec") or {}, metadata.get("annotations") or {}, gates))


# ---------------------------------------------------------------- RayJob


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
    if "DeleteWorkers" in policies.values() and _autoscaling(spec.get("rayClusterSpec") or {}):
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
        if policy == "DeleteWorkers" and _autoscaling(spec.get("rayClusterSpec") or {}):
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
