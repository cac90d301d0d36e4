"""tools.seams.kube.manifests: which objects the kubectl handler applies with overwrite (kubectl apply) and which it
creates (aws-cdk-lib's kubectl handler: Overwrite unset means `kubectl create --save-config`)."""

from __future__ import annotations

import json

import pytest

from tools.seams import kube
from tools.seams.cfn import Resolver


@pytest.mark.parametrize("overwrite, applied", [(None, False), ("true", True), (True, True), ("false", False),
                                                ("False", False)])
def test_an_object_is_applied_with_overwrite_only_when_overwrite_is_true(overwrite, applied):
    props = {"Manifest": json.dumps([{"kind": "Namespace", "metadata": {"name": "a"}},
                                     {"kind": "Namespace", "metadata": {"name": "b"}}])}
    if overwrite is not None:
        props["Overwrite"] = overwrite
    r = Resolver({"Resources": {"Objects": {"Type": kube.MANIFEST_RESOURCE, "Properties": props}}})
    assert [(lid, obj["metadata"]["name"], flag) for lid, obj, flag in kube.manifests(r)] == [
        ("Objects", "a", applied), ("Objects", "b", applied)]
