"""tools.seams.registry: Helm values or add-on configuration that is not JSON is refused by name, not read as
pulling nothing."""

from __future__ import annotations

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
