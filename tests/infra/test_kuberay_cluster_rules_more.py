"""cdk_constructs/kuberay_cluster_rules.py against KubeRay v1.7's validation.go, each rule on both sides of its
condition: validateWorkerGroupPriority, validateRayGroupResources, validateRayGroupLabels and the fault-tolerance
annotation rule of ValidateRayClusterSpec."""

from __future__ import annotations

import pytest

from cdk_constructs.kuberay_basics import FEATURE_GATE_DEFAULTS
from cdk_constructs.kuberay_cluster_rules import ray_cluster_spec


def spec(worker: dict | None = None, head: dict | None = None, head_env: list[dict] | None = None, **fields) -> dict:
    """A RayCluster spec KubeRay accepts (autoscaling off, one worker group of fixed size), changed as given."""
    container = {"name": "ray-head", "image": "rayproject/ray:2.58.0", "env": head_env or []}
    return {"rayVersion": "2.58.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}, **(head or {})},
            "workerGroupSpecs": [{"groupName": "gpu", "minReplicas": 2, "maxReplicas": 2, "rayStartParams": {},
                                  "template": {"spec": {"containers": [{"name": "ray-worker", "image": "x"}]}},
                                  **(worker or {})}],
            **fields}


def rules(cluster: dict, annotations: dict | None = None, rule: str | None = None) -> list[tuple[str, str]]:
    found = ray_cluster_spec(cluster, annotations or {}, dict(FEATURE_GATE_DEFAULTS))
    return [f for f in found if rule is None or f[0] == rule]


def test_the_base_spec_passes():
    assert rules(spec()) == []


V2 = {"enableInTreeAutoscaling": True, "autoscalerOptions": {"version": "v2"}}
V1 = {"enableInTreeAutoscaling": True}


# validateWorkerGroupPriority: nil or 0 passes; otherwise RayVersion must be set, parse (version.ParseGeneric)
# and be at least 2.56.0 (each refused before the autoscaler is looked at), then autoscaler v2 must be on
# (IsAutoscalingV2Enabled, or RAY_enable_autoscaler_v2 "1"/"true" on the head's Ray container).
@pytest.mark.parametrize("ray_version", ["", "latest", "nightly", "2", "2.55.9"])
def test_a_worker_groups_priority_needs_a_ray_version_of_2_56_or_later_set_and_parsable(ray_version):
    cluster = spec({"priority": 5}, rayVersion=ray_version, **V2)
    assert rules(cluster, rule="validateWorkerGroupPriority") == [
        ("validateWorkerGroupPriority", "worker group gpu: priority needs rayVersion 2.56.0 or later")]


def test_a_worker_groups_priority_without_any_ray_version_is_refused():
    cluster = spec({"priority": 5}, **V2)
    del cluster["rayVersion"]
    assert [f[0] for f in rules(cluster)] == ["validateWorkerGroupPriority"]


@pytest.mark.parametrize("ray_version", ["2.56.0", "v2.56", "2.58.0", "3.0.0"])
def test_a_worker_groups_priority_with_ray_2_56_or_later_and_autoscaler_v2_passes(ray_version):
    assert rules(spec({"priority": 5}, rayVersion=ray_version, **V2)) == []


@pytest.mark.parametrize("cluster_fields,head_env,refused", [
    (V2, None, False),
    (V1, None, True),
    ({"enableInTreeAutoscaling": True, "autoscalerOptions": {"version": "v1"}}, None, True),
    (V1, [{"name": "RAY_enable_autoscaler_v2", "value": "1"}], False),
    (V1, [{"name": "RAY_enable_autoscaler_v2", "value": "true"}], False),
    (V1, [{"name": "RAY_enable_autoscaler_v2", "value": "0"}], True),
])
def test_a_worker_groups_priority_needs_autoscaler_v2_by_the_spec_or_the_heads_environment(cluster_fields, head_env,
                                                                                          refused):
    found = rules(spec({"priority": 5}, head_env=head_env, **cluster_fields), rule="validateWorkerGroupPriority")
    assert found == ([("validateWorkerGroupPriority", "worker group gpu: priority needs autoscaler v2")] if refused else [])


@pytest.mark.parametrize("ray_version", ["", "2.50.0", "2.58.0"])
def test_a_priority_of_zero_is_no_priority_whatever_the_version_and_autoscaler(ray_version):
    assert rules(spec({"priority": 0}, rayVersion=ray_version), rule="validateWorkerGroupPriority") == []


# validateRayGroupResources: any one of num-cpus, num-gpus, memory, resources set (non-empty) in rayStartParams
# together with a non-empty group resources map is refused, for the head and for each worker group.
@pytest.mark.parametrize("param", ["num-cpus", "num-gpus", "memory", "resources"])
@pytest.mark.parametrize("group", ["head", "worker"])
def test_any_one_ray_start_resource_with_group_resources_is_refused(param, group):
    fields = {"rayStartParams": {param: "4"}, "resources": {"GPU": "4"}}
    cluster = spec(head=fields) if group == "head" else spec(worker=fields)
    name = "Head" if group == "head" else "gpu"
    assert rules(cluster) == [("validateRayGroupResources",
                               f"{name} group sets resources both in rayStartParams and in resources; use one")]


@pytest.mark.parametrize("fields", [
    {"rayStartParams": {"num-gpus": "4"}},                      # rayStartParams alone
    {"resources": {"GPU": "4"}},                                 # resources alone
    {"rayStartParams": {"num-gpus": "4"}, "resources": {}},     # len(resources) == 0
    {"rayStartParams": {"num-gpus": ""}, "resources": {"GPU": "4"}},  # an empty value is unset
    {"rayStartParams": {"object-store-memory": "100"}, "resources": {"GPU": "4"}},  # not a resource param
])
def test_resources_in_one_place_only_pass(fields):
    assert rules(spec(worker=fields)) == []


# validateRayGroupLabels: a 'labels' key in rayStartParams is refused even empty; each label key must be a
# qualified name (IsQualifiedName) and each value a label value (IsValidLabelValue: empty allowed, no '/').
@pytest.mark.parametrize("value", ["", "zone=a"])
def test_a_labels_entry_in_ray_start_params_is_refused_even_empty(value):
    assert rules(spec(worker={"rayStartParams": {"labels": value}})) == [
        ("validateRayGroupLabels", "rayStartParams['labels'] is not supported for gpu group; use labels")]


@pytest.mark.parametrize("key,value,refused", [
    ("ray.io/market-type", "spot", []),
    ("team", "", []),                                          # an empty value is a valid label value
    ("example.com/accelerator", "nvidia-l4", []),
    ("team", "example.com/x", ["value"]),                      # a qualified name, but '/' is no label value
    ("team", "-spot", ["value"]),
    ("team", "a" * 64, ["value"]),
    ("-team", "spot", ["key"]),
    ("Example.com/x", "spot", ["key"]),                        # the prefix is a lower-case DNS subdomain
])
def test_group_label_keys_and_values_follow_kubernetes_rules(key, value, refused):
    expected = {"key": ("validateRayGroupLabels", f"invalid label key {key!r} in gpu group"),
                "value": ("validateRayGroupLabels", f"invalid label value {value!r} for {key!r} in gpu group")}
    assert rules(spec(worker={"labels": {key: value}})) == [expected[r] for r in refused]


# ValidateRayClusterSpec: `annotations[RayFTEnabledAnnotationKey] != "" && spec.GcsFaultToleranceOptions != nil`
# is refused: any non-empty value of the annotation, "false" included, conflicts with the options.
@pytest.mark.parametrize("value,refused", [("true", True), ("false", True), ("True", True), ("", False)])
def test_a_non_empty_ft_annotation_conflicts_with_fault_tolerance_options(value, refused):
    cluster = spec(gcsFaultToleranceOptions={"redisAddress": "redis:6379"})
    found = rules(cluster, {"ray.io/ft-enabled": value})
    conflict = ("ValidateRayClusterSpec", "ray.io/ft-enabled annotation and gcsFaultToleranceOptions are both set")
    assert (conflict in found) is refused


# ValidateRayClusterSpec under autoscaler v2: the head's and each worker group's restartPolicy must be "" or Never;
# the v1 autoscaler (or none) takes any.
@pytest.mark.parametrize("group", ["head", "worker"])
@pytest.mark.parametrize("autoscaler,policy,refused", [
    (V2, "OnFailure", True), (V2, "Always", True), (V2, "Never", False), (V2, None, False), (V1, "OnFailure", False)])
def test_restart_policy_under_autoscaler_v2_is_never_or_unset(group, autoscaler, policy, refused):
    cluster = spec(worker={"minReplicas": 0}, **autoscaler)
    pod = (cluster["headGroupSpec"] if group == "head" else cluster["workerGroupSpecs"][0])["template"]["spec"]
    if policy:
        pod["restartPolicy"] = policy
    name = "head" if group == "head" else "gpu"
    assert rules(cluster) == (
        [("ValidateRayClusterSpec", f"restartPolicy of {name} must be Never or unset with autoscaler v2")] if refused else [])


# With the in-tree autoscaler on, autoscalerOptions.version and a RAY_enable_autoscaler_v2 variable on the head
# (EnvVarExists: whatever its value) may not both be set; with the autoscaler off the rule does not apply.
@pytest.mark.parametrize("autoscaler,value,refused", [
    ({"enableInTreeAutoscaling": True, "autoscalerOptions": {"version": "v1"}}, "false", True),
    ({"enableInTreeAutoscaling": True, "autoscalerOptions": {"version": "v2"}}, "1", True),
    ({"enableInTreeAutoscaling": True}, "0", False),
    ({"enableInTreeAutoscaling": False, "autoscalerOptions": {"version": "v1"}}, "0", False),
    ({"autoscalerOptions": {"version": "v2"}}, "false", False),
])
def test_the_autoscaler_version_and_its_environment_variable_exclude_each_other_with_the_autoscaler_on(autoscaler,
                                                                                                     value, refused):
    cluster = spec(worker={"minReplicas": 0}, head_env=[{"name": "RAY_enable_autoscaler_v2", "value": value}], **autoscaler)
    both = ("ValidateRayClusterSpec", "autoscalerOptions.version and RAY_enable_autoscaler_v2 are both set")
    assert (both in rules(cluster)) is refused


# validateGcsFaultToleranceBackend, redis backend (the default): `options.Storage != nil` is refused, {} included.
@pytest.mark.parametrize("storage,refused", [({}, True), ({"size": "10Gi"}, True), (None, False)])
def test_storage_options_belong_to_the_rocksdb_backend_only(storage, refused):
    options = {"redisAddress": "redis:6379", **({} if storage is None else {"storage": storage})}
    assert rules(spec(gcsFaultToleranceOptions=options), rule="validateGcsFaultToleranceBackend") == (
        [("validateGcsFaultToleranceBackend", "gcsFaultToleranceOptions.storage applies to the rocksdb backend only")]
        if refused else [])


# ValidateRayClusterSpec: `spec.<field> != nil && !features.Enabled(<gate>)`, each field with its own gate.
@pytest.mark.parametrize("field_name,gate", [("historyServerOptions", "RayClusterHistoryServer"),
                                             ("networkPolicy", "RayClusterNetworkPolicy"), ("tlsOptions", "RayClusterMTLS")])
@pytest.mark.parametrize("value", [{}, {"enabled": True}])
def test_each_gated_option_needs_its_own_gate_even_empty(field_name, gate, value):
    cluster = spec(**{field_name: value})
    assert rules(cluster) == [("ValidateRayClusterSpec", f"spec.{field_name} needs the {gate} feature gate")]
    others_on = {g: True for g in ("RayClusterHistoryServer", "RayClusterNetworkPolicy", "RayClusterMTLS") if g != gate}
    assert ray_cluster_spec(cluster, {}, {**FEATURE_GATE_DEFAULTS, **others_on}) == [
        ("ValidateRayClusterSpec", f"spec.{field_name} needs the {gate} feature gate")]
    assert ray_cluster_spec(cluster, {}, {**FEATURE_GATE_DEFAULTS, gate: True}) == []


# IsGCSFaultToleranceEnabled: gcsFaultToleranceOptions != nil turns it on, {} included; then RAY_REDIS_ADDRESS
# and REDIS_PASSWORD in the head conflict with the options, and without options RAY_REDIS_ADDRESS alone is refused.
@pytest.mark.parametrize("options,expected", [
    ({}, ["RAY_REDIS_ADDRESS in the head conflicts with gcsFaultToleranceOptions"]),
    (None, ["RAY_REDIS_ADDRESS in the head enables GCS fault tolerance without gcsFaultToleranceOptions"]),
])
def test_empty_fault_tolerance_options_turn_fault_tolerance_on(options, expected):
    fields = {} if options is None else {"gcsFaultToleranceOptions": options}
    cluster = spec(head_env=[{"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"}], **fields)
    assert [m for _, m in rules(cluster)] == expected


@pytest.mark.parametrize("value,refused", [("secret", True), ("", False)])
def test_a_redis_password_in_ray_start_params_conflicts_with_fault_tolerance_options(value, refused):
    cluster = spec(head={"rayStartParams": {"redis-password": value}}, gcsFaultToleranceOptions={})
    assert rules(cluster) == (
        [("ValidateRayClusterSpec", "redis-password in rayStartParams conflicts with gcsFaultToleranceOptions")] if refused else [])


@pytest.mark.parametrize("mode,k8s_auth,secret,expected", [
    ("token", True, "ray-token", ["authOptions.enableK8sTokenAuth and authOptions.secretName are both set"]),
    ("token", False, "ray-token", []),
    (None, True, None, ["authOptions.enableK8sTokenAuth needs authOptions.mode token"]),
    ("disabled", True, None, ["authOptions.enableK8sTokenAuth needs authOptions.mode token"]),
    ("disabled", False, "ray-token", []),
])
def test_kubernetes_token_auth_needs_token_mode_and_no_secret_name(mode, k8s_auth, secret, expected):
    auth = {k: v for k, v in (("mode", mode), ("enableK8sTokenAuth", k8s_auth), ("secretName", secret)) if v is not None}
    assert [m for _, m in rules(spec(authOptions=auth))] == expected


# validateGcsFaultToleranceBackend, rocksdb backend (behind its gate): redisAddress and externalStorageNamespace are
# strings, refused when not empty; redisUsername and redisPassword are pointers to a credential object, refused
# when present at all (`!= nil`), an empty object included.
@pytest.mark.parametrize("field_name,value,refused", [
    ("redisAddress", "redis:6379", True), ("redisAddress", "", False),
    ("externalStorageNamespace", "ns", True), ("externalStorageNamespace", "", False),
    ("redisUsername", {"value": "ray"}, True), ("redisUsername", {}, True),
    ("redisPassword", {"value": "secret"}, True), ("redisPassword", {}, True),
])
def test_the_rocksdb_backend_refuses_each_redis_field_that_is_set(field_name, value, refused):
    cluster = spec(gcsFaultToleranceOptions={"backend": "rocksdb", field_name: value})
    found = ray_cluster_spec(cluster, {}, {**FEATURE_GATE_DEFAULTS, "GCSFaultToleranceEmbeddedStorage": True})
    assert found == ([("validateGcsFaultToleranceBackend", f"{field_name} cannot be set with the rocksdb backend")]
                     if refused else [])


@pytest.mark.parametrize("autoscaler,refused", [({"enableInTreeAutoscaling": True}, False), ({}, True)])
def test_a_worker_group_may_leave_out_its_replica_bounds_only_with_the_autoscaler_on(autoscaler, refused):
    cluster = spec(**autoscaler)
    for bound in ("minReplicas", "maxReplicas"):
        del cluster["workerGroupSpecs"][0][bound]
    assert rules(cluster) == ([("ValidateRayClusterSpec", "worker group gpu must set minReplicas and maxReplicas when "
                                                         "autoscaling is off")] if refused else [])
