"""The trainer as one zip archive in a ConfigMap, and what the API server will accept of it.

The pods import the trainer from the archive itself (PYTHONPATH=<the archive>: Python's zipimport), so
the ConfigMap holds one compressed `binaryData` entry instead of every source file in the clear.

Two limits of the API server apply to the ConfigMap, under the verb aws-cdk-lib's kubectl handler uses
for an `overwrite` manifest, `kubectl apply`:
- a ConfigMap's data and binaryData values (decoded; keys not counted) together at most 1 MiB
  (kubernetes pkg/apis/core/validation ValidateConfigMap, MaxSecretSize = 1 MiB);
- an object's annotations at most 262,144 bytes, counted as len(key) + len(value) over all of them
  (apimachinery pkg/api/validation/objectmeta.go ValidateAnnotationsSize, TotalAnnotationSizeLimitB).
  `kubectl apply` stores the whole object it applied in the annotation
  kubectl.kubernetes.io/last-applied-configuration, so the archive counts there a second time, base64.
We refuse above 75% of that 262,144, so that the trainer's growth fails at synth, never as a rollback.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile

from cdk_constructs.errors import ConstructError

ARCHIVE_KEY = "trainer.zip"
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
ANNOTATIONS_LIMIT_BYTES = 256 * 1024
ANNOTATIONS_BUDGET_BYTES = ANNOTATIONS_LIMIT_BYTES * 3 // 4
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# aws-cdk-lib's KubernetesManifest labels every object `aws.cdk.eks/prune-<the construct's 42-character
# address>` with an empty value (k8s-manifest.ts injectPruneLabel); it is part of what kubectl applies.
PRUNE_LABEL_STAND_IN = "aws.cdk.eks/prune-" + "c8" + "0" * 40
# One fixed time for every member (zip's earliest), so the same files give the same archive, the same
# ConfigMap and the same job name on every machine.
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def trainer_archive(files: dict[str, str]) -> bytes:
    """A deterministic zip of `files` (path relative to the package's parent -> source): sorted names,
    one timestamp, fixed permissions, deflate at level 9."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(files):
            member = zipfile.ZipInfo(path, date_time=_FIXED_TIME)
            member.compress_type = zipfile.ZIP_DEFLATED
            member.create_system = 3  # Unix, whatever machine synthesizes
            member.external_attr = 0o644 << 16
            archive.writestr(member, files[path].encode(), compresslevel=9)
    return buffer.getvalue()


def biggest_members(archive: bytes, count: int = 3) -> list[tuple[str, int]]:
    """The archive's largest members by compressed size: what to shrink first."""
    with zipfile.ZipFile(io.BytesIO(archive)) as opened:
        sizes = [(info.filename, info.compress_size) for info in opened.infolist()]
    return sorted(sizes, key=lambda item: (-item[1], item[0]))[:count]


def go_json(value: object) -> str:
    """JSON as Go's encoding/json writes an unstructured object: compact, map keys sorted, UTF-8 kept,
    and <, >, &, U+2028, U+2029 escaped (encoding/json HTMLEscape, on by default)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def kubectl_applied_annotations(manifest: dict) -> dict[str, str]:
    """The annotations the object holds after `kubectl apply`: its own, plus last-applied-configuration,
    the object as applied (less that annotation), encoded by the unstructured JSON scheme
    (json.Encoder.Encode: Go's JSON and a newline)."""
    applied = json.loads(json.dumps(manifest))
    metadata = applied.setdefault("metadata", {})
    labels = metadata.setdefault("labels", {})
    if not any(key.startswith("aws.cdk.eks/prune-") for key in labels):  # the synthesized object carries its own
        labels[PRUNE_LABEL_STAND_IN] = ""
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != LAST_APPLIED}
    metadata["annotations"] = annotations
    return {**annotations, LAST_APPLIED: go_json(applied) + "\n"}


def annotations_bytes(annotations: dict[str, str]) -> int:
    """ValidateAnnotationsSize's count: len(key) + len(value), in bytes."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def configmap_bytes(configmap: dict) -> int:
    """ValidateConfigMap's count: the values of data and the decoded values of binaryData (`totalSize +=
    len(value)` over both; the keys are not counted)."""
    data = configmap.get("data") or {}
    binary = configmap.get("binaryData") or {}
    return sum(len(v.encode()) for v in data.values()) + sum(len(base64.b64decode(v)) for v in binary.values())


def check_configmap_fits(configmap: dict, archive: bytes, budget: int = ANNOTATIONS_BUDGET_BYTES) -> None:
    """Refuse, in one line, a trainer ConfigMap the API server would refuse or that is near its limits."""
    size = configmap_bytes(configmap)
    if size > CONFIGMAP_LIMIT_BYTES:
        raise ConstructError(f"trainer ConfigMap: {size} bytes exceeds Kubernetes' 1 MiB limit")
    stored = annotations_bytes(kubectl_applied_annotations(configmap))
    if stored > budget:
        biggest = ", ".join(f"{path} ({size} bytes compressed)" for path, size in biggest_members(archive))
        raise ConstructError(
            f"trainer ConfigMap: `kubectl apply` would store {stored} bytes of annotations, above {budget} "
            f"({budget * 100 // ANNOTATIONS_LIMIT_BYTES}% of the API server's {ANNOTATIONS_LIMIT_BYTES}-byte limit); "
            f"biggest files: {biggest}")
