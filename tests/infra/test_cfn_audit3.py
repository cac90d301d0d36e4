"""tools.seams.cfn: what the resolver cannot know stops the check by name (a reference to nothing, a pseudo
parameter it does not model, an undefined condition), and a condition named inside another is resolved."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_cfn import resolve
from tools.seams.cfn import Resolver, SeamError


@pytest.mark.parametrize("value", [{"Ref": "Missing"}, {"Fn::GetAtt": ["Missing", "Arn"]}])
def test_a_reference_to_a_resource_the_template_does_not_define_is_refused(value):
    with pytest.raises(SeamError, match="^Ref/GetAtt to Missing, which the template does not define$"):
        resolve(value)


@pytest.mark.parametrize("name, value", [
    # CloudFormation User Guide, "Pseudo parameters reference".
    ("AWS::Region", "eu-west-1"), ("AWS::AccountId", "111122223333"), ("AWS::Partition", "aws"),
])
def test_a_modelled_pseudo_parameter_resolves(name, value):
    assert resolve({"Ref": name}) == value


def test_a_pseudo_parameter_not_modelled_is_refused_naming_it():
    with pytest.raises(SeamError, match="^pseudo parameter AWS::NotificationARNs is not modelled$"):
        resolve({"Ref": "AWS::NotificationARNs"})


@pytest.mark.parametrize("inner, value", [({"Fn::Equals": ["a", "a"]}, False), ({"Fn::Equals": ["a", "b"]}, True)])
def test_a_condition_named_inside_another_is_resolved(inner, value):
    # "Condition functions": a condition may name another with {"Condition": name}.
    t = {"Conditions": {"Inner": inner, "Outer": {"Fn::Not": [{"Condition": "Inner"}]}}, "Resources": {}}
    assert Resolver(t).condition("Outer") is value


def test_an_undefined_condition_is_refused_naming_it():
    t = {"Conditions": {"Outer": {"Fn::Not": [{"Condition": "Nowhere"}]}}, "Resources": {}}
    with pytest.raises(SeamError, match="^condition Nowhere is not defined in the template$"):
        Resolver(t).condition("Outer")
