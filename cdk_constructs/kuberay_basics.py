"""What the KubeRay rules share (cdk_constructs/kuberay_rules.py): KubeRay v1.7's feature gates and limits, the
Violation a rule reports, Kubernetes' name rules (k8s.io/apimachinery util/validation), version parsing, and
readers of a group's Ray container and the cluster's autoscaler settings."""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def at_least(version: tuple[int, ...], minimum: tuple[int, ...]) -> bool:
    width = max(len(version), len(minimum))
    return version + (0,) * (width - len(version)) >= minimum + (0,) * (width - len(minimum))


# ---------------------------------------------------------------- small readers


def env_by_name(container: dict) -> dict[str, dict]:
    return {e.get("name"): e for e in container.get("env") or []}


def ray_container(group: dict) -> dict:
    """KubeRay reads the Ray container at index 0 (RayContainerIndex)."""
    containers = (group.get("template") or {}).get("spec", {}).get("containers") or []
    return containers[0] if containers else {}


def autoscaling(spec: dict) -> bool:
    return spec.get("enableInTreeAutoscaling") is True


def autoscaling_v2(spec: dict) -> bool:
    return autoscaling(spec) and (spec.get("autoscalerOptions") or {}).get("version") == "v2"


def v2_env_on(spec: dict) -> bool:
    value = env_by_name(ray_container(spec.get("headGroupSpec") or {})).get("RAY_enable_autoscaler_v2", {}).get("value")
    return value in ("1", "true")
