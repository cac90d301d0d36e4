"""The trainer ConfigMap as the API server and the pod see it (cdk_constructs/trainer_archive.py).

- The API server: `kubectl apply` (aws-cdk-lib's kubectl handler for an `overwrite` manifest) stores the
  applied object in the annotation kubectl.kubernetes.io/last-applied-configuration; an object's
  annotations may total 262,144 bytes (apimachinery ValidateAnnotationsSize: len(key) + len(value)); a
  ConfigMap's data and decoded binaryData 1 MiB (ValidateConfigMap).
- The pod: the archive alone, at the path PYTHONPATH names, in a folder holding nothing else; Python
  imports the trainer through zipimport.
"""

from __future__ import annotations

import base64
import io
import os
import random
import subprocess
import sys
import zipfile

import pytest

from cdk_constructs import ray_manifests as rm
from cdk_constructs import trainer_archive as ta
from cdk_constructs.errors import ConstructError
from tests.conftest import pure_workload

PRUNE_LABEL = "aws.cdk.eks/prune-c80000000000000000000000000000000000000000"


def _configmap(binary: str, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "t", "annotations": annotations or {"h": "1"}},
            "binaryData": {"trainer.zip": binary}}


# ------------------------------------------------------------------ what the API server stores


def test_kubectl_apply_stores_the_object_as_compact_json_with_its_labels_and_annotations():
    """A worked example of kubectl's last-applied-configuration: the object as applied, less that annotation,
    in Go's encoding (compact, keys sorted, <>& escaped) followed by a newline, beside the object's own."""
    configmap = _configmap("AAAA", {"h": "<&>", ta.LAST_APPLIED: "stale"})
    assert ta.kubectl_applied_annotations(configmap) == {
        "h": "<&>",
        ta.LAST_APPLIED: '{"apiVersion":"v1","binaryData":{"trainer.zip":"AAAA"},"kind":"ConfigMap",'
                         '"metadata":{"annotations":{"h":"\\u003c\\u0026\\u003e"},'
                         f'"labels":{{"{PRUNE_LABEL}":""}},"name":"t"}}}}\n'}


def test_annotation_size_counts_keys_and_values_in_bytes():
    assert ta.annotations_bytes({"ab": "cd", "é": ""}) == 4 + 2  # é is 2 bytes in UTF-8


# The worked example's stored annotations: "h" + "1" and the last-applied key + its value, by hand.
_EXAMPLE_LAST_APPLIED = ('{"apiVersion":"v1","binaryData":{"trainer.zip":"AAAA"},"kind":"ConfigMap",'
                         f'"metadata":{{"annotations":{{"h":"1"}},"labels":{{"{PRUNE_LABEL}":""}},"name":"t"}}}}\n')
_EXAMPLE_STORED = 2 + len("kubectl.kubernetes.io/last-applied-configuration") + len(_EXAMPLE_LAST_APPLIED)


def test_the_guard_passes_a_configmap_at_its_budget():
    ta.check_configmap_fits(_configmap("AAAA"), b"", budget=_EXAMPLE_STORED)


def test_the_guard_refuses_one_byte_over_its_budget_naming_the_three_biggest_files():
    rng = random.Random(0)
    # Random hex compresses to about half, whatever the seed: the order of the sizes is kept.
    files = {f"training/{name}.py": rng.randbytes(size).hex()
             for name, size in (("small", 100), ("big", 4000), ("bigger", 6000), ("biggest", 8000))}
    archive = ta.trainer_archive(files)
    with pytest.raises(ConstructError, match=(
            rf"^trainer ConfigMap: `kubectl apply` would store {_EXAMPLE_STORED} bytes of annotations, above "
            rf"{_EXAMPLE_STORED - 1} \(0% of the API server's 262144-byte limit\); biggest files: "
            r"training/biggest.py \(\d+ bytes compressed\), training/bigger.py \(\d+ bytes compressed\), "
            r"training/big.py \(\d+ bytes compressed\)$")):
        ta.check_configmap_fits(_configmap("AAAA"), archive, budget=_EXAMPLE_STORED - 1)


def test_the_default_budget_is_three_quarters_of_the_api_servers_limit():
    assert ta.ANNOTATIONS_BUDGET_BYTES == 196_608  # 0.75 x 262,144 (TotalAnnotationSizeLimitB = 256 KiB)


def test_a_configmap_of_1_mib_decoded_passes_and_one_byte_more_is_refused():
    """ValidateConfigMap counts binaryData decoded, and values only (`totalSize += len(value)`, keys not
    counted): 1 MiB of archive is 1.33 MiB of base64 and still allowed."""
    room = 1024 * 1024
    ta.check_configmap_fits(_configmap(base64.b64encode(b"x" * room).decode()), b"", budget=10**8)
    with pytest.raises(ConstructError, match=r"^trainer ConfigMap: 1048577 bytes exceeds Kubernetes' 1 MiB limit$"):
        ta.check_configmap_fits(_configmap(base64.b64encode(b"x" * (room + 1)).decode()), b"", budget=10**8)


def test_the_trainer_configmap_builder_runs_the_guard():
    with pytest.raises(ConstructError, match=r"would store \d+ bytes of annotations, above 100 .*training/train.py"):
        rm.trainer_configmap("t", "n", {"training/train.py": "x = 1\n"}, budget=100)


def test_the_default_configmap_stays_within_the_budget():
    """The ConfigMap shipped as source files stored 253,659 bytes under `kubectl apply`, 96.8% of the limit."""
    configmap = pure_workload()["ConfigMap"]
    assert ta.annotations_bytes(ta.kubectl_applied_annotations(configmap)) <= 196_608


# ------------------------------------------------------------------ the archive


def test_the_archive_does_not_depend_on_order_or_clock():
    files = {"training/b.py": "b = 1\n", "training/a.py": "a = 1\n"}
    archive = ta.trainer_archive(files)
    assert archive == ta.trainer_archive(dict(reversed(files.items())))
    with zipfile.ZipFile(io.BytesIO(archive)) as opened:
        assert [(i.filename, i.date_time, i.compress_type) for i in opened.infolist()] == [
            ("training/a.py", (1980, 1, 1, 0, 0, 0), zipfile.ZIP_DEFLATED),
            ("training/b.py", (1980, 1, 1, 0, 0, 0), zipfile.ZIP_DEFLATED)]


# ------------------------------------------------------------------ the pod


def _as_the_pod_mounts_it(configmap: dict, folder, leave_out: str | None = None) -> str:
    """The ConfigMap's archive alone in an empty folder, as the subPath mount puts it; returns its path."""
    archive = base64.b64decode(configmap["binaryData"][ta.ARCHIVE_KEY])
    if leave_out:
        with zipfile.ZipFile(io.BytesIO(archive)) as whole:
            kept = {name: whole.read(name).decode() for name in whole.namelist() if name != leave_out}
        archive = ta.trainer_archive(kept)
    path = folder / ta.ARCHIVE_KEY
    path.write_bytes(archive)
    return str(path)


def _run_the_trainer_help(archive: str, cwd) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": archive, "PATH": os.environ["PATH"], "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-m", "training.train", "--help"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_shipped_archive_alone_runs_the_trainer(tmp_path):
    configmap = pure_workload()["ConfigMap"]
    done = _run_the_trainer_help(_as_the_pod_mounts_it(configmap, tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: python -m training.train")


def test_an_archive_without_a_module_the_trainer_imports_fails(tmp_path):
    configmap = pure_workload()["ConfigMap"]
    done = _run_the_trainer_help(_as_the_pod_mounts_it(configmap, tmp_path, leave_out="training/config.py"), tmp_path)
    assert done.returncode != 0
    assert "No module named 'training.config'" in done.stderr


def test_kubectl_apply_keeps_non_ascii_as_utf8():
    """Go's encoding/json writes valid UTF-8 as is (it escapes only <, >, &, U+2028, U+2029 and invalid bytes):
    'é' stays 2 bytes in the stored annotation, not the 6 of \\u00e9."""
    stored = ta.kubectl_applied_annotations(_configmap("AAAA", {"note": "café"}))[ta.LAST_APPLIED]
    assert '"annotations":{"note":"café"}' in stored
