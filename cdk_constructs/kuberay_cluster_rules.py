"""KubeRay v1.7's rules for a RayCluster (ray-operator/controllers/ray/utils/validation.go ValidateRayClusterMetadata,
ValidateRayClusterSpec and what they call), also applied to a RayJob's rayClusterSpec; see kuberay_rules.py."""

from __future__ import annotations

from cdk_constructs.kuberay_basics import (EXTERNAL_STORAGE_NS_ANNOTATION, FEATURE_GATE_DEFAULTS, FT_ENABLED_ANNOTATION,
                                           MAX_RAY_CLUSTER_NAME, MIN_RAY_FOR_K8S_TOKEN_AUTH, MIN_RAY_FOR_PRIORITY,
                                           MIN_RAY_FOR_TOKEN_AUTH, ORIGINATED_FROM_CRD_LABEL, RAY_START_RESOURCE_PARAMS,
                                           at_least, autoscaling, autoscaling_v2, env_by_name, is_dns1035_label,
                                           is_qualified_name, is_valid_label_value, parse_generic_version,
                                           ray_container, v2_env_on)


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
    if not autoscaling(spec) and (low is None or high is None):
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
    elif idle is not None and not (autoscaling_v2(spec) or v2_env_on(spec)):
        found.append(("validateWorkerGroupIdleTimeout", f"worker group {name}: idleTimeoutSeconds needs autoscaler v2"))
    if group.get("priority"):
        version = parse_generic_version(spec.get("rayVersion", ""))
        if version is None or not at_least(version, MIN_RAY_FOR_PRIORITY):
            found.append(("validateWorkerGroupPriority", f"worker group {name}: priority needs rayVersion 2.56.0 or later"))
        elif not (autoscaling_v2(spec) or v2_env_on(spec)):
            found.append(("validateWorkerGroupPriority", f"worker group {name}: priority needs autoscaler v2"))
    if group.get("suspend") and not gates["RayJobDeletionPolicy"]:
        found.append(("ValidateRayClusterSpec", f"worker group {name} can be suspended only with the RayJobDeletionPolicy gate"))
    if group.get("suspend") and autoscaling(spec):
        found.append(("ValidateRayClusterSpec", f"worker group {name} cannot be suspended with the autoscaler on"))
    return found


def _fault_tolerance(spec: dict, annotations: dict, gates: dict) -> list[tuple[str, str]]:
    head = spec.get("headGroupSpec") or {}
    params, env = head.get("rayStartParams") or {}, env_by_name(ray_container(head))
    options = spec.get("gcsFaultToleranceOptions")
    found = []
    if annotations.get(FT_ENABLED_ANNOTATION) and options is not None:
        found.append(("ValidateRayClusterSpec", f"{FT_ENABLED_ANNOTATION} annotation and gcsFaultToleranceOptions are both set"))
    # utils.IsGCSFaultToleranceEnabled: the annotation counts only as "true", in any case
    ft_on = str(annotations.get(FT_ENABLED_ANNOTATION, "")).lower() == "true" or options is not None
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
    # redisAddress and externalStorageNamespace are strings (set when not empty); redisUsername and redisPassword
    # point to a credential object (set when present, an empty one included: validation.go checks != nil).
    redis_only = [k for k in ("redisAddress", "redisUsername", "redisPassword", "externalStorageNamespace")
                  if (options.get(k) is not None if k in ("redisUsername", "redisPassword") else options.get(k))]
    return [("validateGcsFaultToleranceBackend", f"{k} cannot be set with the rocksdb backend") for k in redis_only]


def _autoscaler(spec: dict) -> list[tuple[str, str]]:
    head = spec.get("headGroupSpec") or {}
    env = env_by_name(ray_container(head))
    options = spec.get("autoscalerOptions") or {}
    found = []
    if not autoscaling(spec) and env.get("RAY_enable_autoscaler_v2", {}).get("value") in ("1", "true"):
        found.append(("ValidateRayClusterSpec", "RAY_enable_autoscaler_v2 is on while enableInTreeAutoscaling is off"))
    if autoscaling(spec) and options.get("version") is not None and "RAY_enable_autoscaler_v2" in env:
        found.append(("ValidateRayClusterSpec", "autoscalerOptions.version and RAY_enable_autoscaler_v2 are both set"))
    if autoscaling_v2(spec):
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
    if not at_least(version, MIN_RAY_FOR_TOKEN_AUTH):
        return [("ValidateRayClusterSpec", f"authOptions.mode token needs Ray 2.52.0 or later, got {spec['rayVersion']}")]
    found = []
    if k8s_auth and not at_least(version, MIN_RAY_FOR_K8S_TOKEN_AUTH):
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
