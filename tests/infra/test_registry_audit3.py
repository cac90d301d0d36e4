"""tools.seams.registry: Helm values or add-on configuration that is not JSON is refused by name, not read as
pulling nothing; Helm values' images are read; a pull without a source leaves the later pulls checked."""

from __future__ import annotations

import json

import pytest

from tests.infra.test_registry_cases import HERE, _template_pulling
from tools.seams import registry
from tools.seams.cfn import Resolver, SeamError


def test_add_on_configuration_that_is_not_json_is_refused_naming_the_add_on():
    template = _template_pulling(f"{HERE}/ecr-public/x:1")
    # EKS accepts YAML configuration values too; this check reads JSON only, and says so rather than see no image.
    template["Resources"]["Addon"]["Properties"]["ConfigurationValues"] = "images:\n  - x\n"
    with pytest.raises(SeamError, match="^Addon: values that are not JSON are not modelled$"):
        registry.pulls(Resolver(template))


def test_helm_values_that_are_not_json_are_refused_naming_the_chart_resource():
    template = _template_pulling()
    template["Resources"]["Chart"] = {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {
        "Chart": "aws-efa-k8s-device-plugin", "Values": "image: {repository: x"}}
    with pytest.raises(SeamError, match="^Chart: values that are not JSON are not modelled$"):
        registry.pulls(Resolver(template))


def test_helm_values_name_the_images_they_pull_from_this_accounts_registry():
    template = _template_pulling()
    template["Resources"]["Chart"] = {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {
        "Chart": "aws-efa-k8s-device-plugin", "Values": '{"image": {"full": "' + HERE + '/ecr-public/efa:1"}}'}}
    [pull] = registry.pulls(Resolver(template))
    assert (pull.where, pull.repository) == ("Helm chart aws-efa-k8s-device-plugin values (Chart)", "ecr-public/efa")


def test_a_pull_without_a_source_does_not_end_the_check_of_the_pulls_after_it():
    template = _template_pulling()
    unsourced = {"kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"image": f"{HERE}/ecr-public/a:1"}]}}
    # The cache rule fetches ecr-public/b from public.ecr.aws/b, not from the annotated source.
    sourced = {"kind": "Pod", "metadata": {"name": "b", "annotations": {
        registry.IMAGE_SOURCE_ANNOTATION: "public.ecr.aws/other/b:1"}},
        "spec": {"containers": [{"image": f"{HERE}/ecr-public/b:1"}]}}
    template["Resources"]["Pods"] = {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {
        "Manifest": json.dumps([unsourced, sourced])}}
    [problem] = registry.problems(Resolver(template, "us-east-2"))
    assert problem.startswith(f"ECR: Pod default/b (Pods) pulls {HERE}/ecr-public/b:1, which rule Rule fetches from "
                              "public.ecr.aws/b:1, not the image's source public.ecr.aws/other/b:1")
