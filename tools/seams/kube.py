"""The Kubernetes API server's side of the seam: what it refuses of the objects the stack applies.

aws-cdk-lib 2.275.0's kubectl handler (custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/apply/__init__.py) applies a
KubernetesManifest with `kubectl apply` when Overwrite is set, else `kubectl create --save-config`;
both store the whole object in the kubectl.kubernetes.io/last-applied-configuration annotation, so
that annotation counts against the object's annotation limit. Limits, from k8s.io/apimachinery and
k8s.io/kubernetes at v1.36:
- annotations: the sum of every key's and value's length at most 262,144 bytes
  (apimachinery pkg/api/validation/objectmeta.go ValidateAnnotationsSize, TotalAnnotationSizeLimitB);
- ConfigMap and Secret: the sum of the data values (binaryData decoded) at most 1 MiB
  (pkg/apis/core/validation/validation.go ValidateConfigMap / ValidateSecret, core.MaxSecretSize);
  keys match [-._a-zA-Z0-9]+, at most 253 (apimachinery IsConfigMapKey);
- names: a DNS-1123 subdomain of at most 253 characters, a DNS-1123 label of at most 63 for a
  Namespace or a Service (apimachinery util/validation IsDNS1123Subdomain / IsDNS1123Label);
- labels: key an optional DNS-1123 subdomain prefix (at most 253) and a name of at most 63, value at
  most 63, both [A-Za-z0-9] at the ends and [-A-Za-z0-9_.] inside (IsQualifiedName / IsValidLabelValue).
And the kubelet's, for the pods KubeRay makes from a RayJob: a preStop hook runs within the pod's
terminationGracePeriodSeconds (30 when unset, core/v1 types.go DefaultTerminationGracePeriodSeconds); one still
running when it ends gets a single 2 s extension and is then killed with the container (pkg/kubelet/kuberuntime
kuberuntime_container.go killContainer, minimumGracePeriodInSeconds). The worker's hook waits `--wait` seconds for
the trainer's save (training.preemption), so that wait must end before the grace period does.
"""

from __future__ import annotations

import base64
import json
import re

from cdk_constructs.trainer_archive import ANNOTATIONS_LIMIT_BYTES as ANNOTATIONS_LIMIT
from cdk_constructs.trainer_archive import LAST_APPLIED, go_json
from cdk_constructs.trainer_archive import annotations_bytes as annotations_size  # ValidateAnnotationsSize's count
from tools.seams.cfn import Resolver

MANIFEST_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
ANNOTATIONS_MARGIN = 0.75
"""The project's margin under the API server's annotation limit (the trainer's code grows: 15 KB in 40 commits)."""
DATA_LIMIT = 1 << 20
SUBDOMAIN_MAX, LABEL_MAX = 253, 63
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
LABEL_NAMED_KINDS = {"Namespace", "Service"}


def manifests(r: Resolver) -> list[tuple[str, dict, bool]]:
    """(logical ID, object, applied with overwrite) of every object the kubectl handler applies."""
    found = []
    for lid, resource in r.resources.items():
        if resource["Type"] != MANIFEST_RESOURCE:
            continue
        props = r.properties(lid)
        objects = json.loads(props["Manifest"])
        for obj in objects if isinstance(objects, list) else [objects]:
            found.append((lid, obj, str(props.get("Overwrite", "false")).lower() == "true"))
    return found


def stored_annotations(obj: dict) -> dict[str, str]:
    """The annotations the API server receives from `kubectl apply`: the object's own plus last-applied,
    which holds the object without that annotation."""
    meta = obj.get("metadata", {})
    own = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    # kubectl sets the annotations to the map without last-applied, an empty one included ("annotations":{}).
    bare = {**obj, "metadata": {**meta, "annotations": own}}
    # Go's encoding/json of the object, then the newline json.Encoder appends (k8s.io/kubectl pkg/util/apply.go
    # GetModifiedConfiguration encodes with apimachinery's UnstructuredJSONScheme).
    return {**own, LAST_APPLIED: go_json(bare) + "\n"}


def data_size(obj: dict) -> int:
    total = sum(len(v.encode()) for v in (obj.get("data") or {}).values())
    if obj.get("kind") == "Secret":
        total = sum(len(base64.b64decode(v)) for v in (obj.get("data") or {}).values())
        total += sum(len(v.encode()) for v in (obj.get("stringData") or {}).values())
    return total + sum(len(base64.b64decode(v)) for v in (obj.get("binaryData") or {}).values())


def name_problems(kind: str, name: str) -> list[str]:
    if kind in LABEL_NAMED_KINDS:
        if len(name) > LABEL_MAX or not _LABEL.fullmatch(name):
            return [f"name {name!r} is not a DNS-1123 label of at most {LABEL_MAX} characters"]
    elif len(name) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(name):
        return [f"name {name!r} is not a DNS-1123 subdomain of at most {SUBDOMAIN_MAX} characters"]
    return []


def label_problems(labels: dict) -> list[str]:
    found = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(prefix)):
            found.append(f"label key {key!r}: prefix is not a DNS-1123 subdomain of at most {SUBDOMAIN_MAX}")
        if len(name) > LABEL_MAX or not _QUALIFIED_NAME.fullmatch(name):
            found.append(f"label key {key!r}: name is not [A-Za-z0-9][-A-Za-z0-9_.]* of at most {LABEL_MAX}")
        if not isinstance(value, str):
            found.append(f"label {key!r}: value {value!r} is not a string")
        elif value and (len(value) > LABEL_MAX or not _QUALIFIED_NAME.fullmatch(value)):
            found.append(f"label {key!r}: value {value!r} is not [A-Za-z0-9][-A-Za-z0-9_.]* of at most {LABEL_MAX}")
    return found


def object_problems(obj: dict, applied: bool = True) -> list[str]:
    """What the API server refuses of `obj` (or, for annotations, what passes the project's margin)."""
    kind, meta = obj.get("kind", "?"), obj.get("metadata", {})
    where = f"{kind} {meta.get('namespace', '')}/{meta.get('name', '?')}".replace(" /", " ")
    found = name_problems(kind, meta.get("name", ""))
    found += label_problems(meta.get("labels") or {})
    annotations = stored_annotations(obj) if applied else (meta.get("annotations") or {})
    size = annotations_size(annotations)
    if size > ANNOTATIONS_LIMIT * ANNOTATIONS_MARGIN:
        verdict = "over the API server's limit" if size > ANNOTATIONS_LIMIT else f"over {ANNOTATIONS_MARGIN:.0%} of it"
        found.append(f"annotations (with kubectl apply's {LAST_APPLIED}) total {size:,} bytes of the "
                     f"API server's {ANNOTATIONS_LIMIT:,}: {verdict}")
    if kind in ("ConfigMap", "Secret"):
        bad_keys = [k for k in list(obj.get("data") or {}) + list(obj.get("binaryData") or {})
                    if len(k) > SUBDOMAIN_MAX or not _CONFIG_KEY.fullmatch(k)]
        found += [f"data key {k!r} is not [-._a-zA-Z0-9]+ of at most {SUBDOMAIN_MAX}" for k in bad_keys]
        if data_size(obj) > DATA_LIMIT:
            found.append(f"data totals {data_size(obj):,} bytes, over the {DATA_LIMIT:,} a {kind} may hold")
    return [f"Kubernetes: {where}: {p}" for p in found]


DEFAULT_GRACE_S = 30


def hook_problems(obj: dict) -> list[str]:
    """A RayJob's pod templates whose preStop hook waits (`--wait N`) as long as the grace period or longer: the
    kubelet kills the hook before it can report, and the container before its save is committed."""
    if obj.get("kind") != "RayJob":
        return []
    cluster = obj.get("spec", {}).get("rayClusterSpec", {})
    groups = [("head", cluster.get("headGroupSpec", {}))] + [(g.get("groupName", "?"), g) for g in cluster.get("workerGroupSpecs", [])]
    found = []
    for name, group in groups:
        pod = group.get("template", {}).get("spec", {})
        grace = pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
        for container in pod.get("containers", []):
            command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            if "--wait" in command and float(command[command.index("--wait") + 1]) >= grace:
                found.append(f"Kubernetes: RayJob {obj['metadata'].get('name', '?')}: group {name}: the preStop hook "
                             f"waits {command[command.index('--wait') + 1]} s, not less than the pod's "
                             f"terminationGracePeriodSeconds {grace}: the kubelet kills it first")
    return found


def problems(r: Resolver) -> list[str]:
    found = []
    for lid, obj, _overwrite in manifests(r):
        # apply (Overwrite) and create --save-config both store last-applied-configuration.
        found += [f"{p} ({lid})" for p in object_problems(obj, applied=True) + hook_problems(obj)]
    return found

