"""The CloudFormation resolver (tools.seams.cfn) against the worked examples of the CloudFormation User Guide's
"Intrinsic function reference" and "Pseudo parameters reference": each function's documented result, so a
resolver that evaluates one the wrong way round fails here without a synth."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_cfn import resolve
from tools.seams.cfn import Resolver, SeamError

YES, NO = {"Fn::Equals": ["a", "a"]}, {"Fn::Equals": ["a", "b"]}


@pytest.mark.parametrize("value, resolved", [
    # Fn::Join: "Fn::Join" : [ ":", [ "a", "b", "c" ] ] returns "a:b:c".
    ({"Fn::Join": [":", ["a", "b", "c"]]}, "a:b:c"),
    ({"Fn::Join": ["", ["a", "b"]]}, "ab"),
    # Fn::Select: index 1 of [ "apples", "grapes", "oranges", "mangoes" ] is "grapes" (indexes start at 0).
    ({"Fn::Select": ["1", ["apples", "grapes", "oranges", "mangoes"]]}, "grapes"),
    ({"Fn::Select": [0, ["apples", "grapes"]]}, "apples"),
    # Fn::Split: "Fn::Split" : [ "|" , "a|b|c" ] returns ["a", "b", "c"].
    ({"Fn::Split": ["|", "a|b|c"]}, ["a", "b", "c"]),
    ({"Fn::Select": [2, {"Fn::Split": [",", "x,y,z"]}]}, "z"),
    # Fn::Base64 of "AWS CloudFormation" is "QVdTIENsb3VkRm9ybWF0aW9u".
    ({"Fn::Base64": "AWS CloudFormation"}, "QVdTIENsb3VkRm9ybWF0aW9u"),
    # Fn::Sub: "${!Literal}" is written as "${Literal}"; a map variable may itself be a Ref.
    ({"Fn::Sub": "x-${!Literal}"}, "x-${Literal}"),
    ({"Fn::Sub": ["${Name}-ng", {"Name": {"Ref": "Cluster"}}]}, "demo-ng"),
    ({"Fn::Sub": "${Cluster.Arn}"}, "arn:aws:eks:eu-west-1:111122223333:cluster/demo"),
    # AWS::NoValue removes the property it is the value of.
    ({"Keep": 1, "Drop": {"Ref": "AWS::NoValue"}}, {"Keep": 1}),
    # Pseudo parameters of the example account in the resolver's region.
    ({"Ref": "AWS::AccountId"}, "111122223333"),
    ({"Ref": "AWS::Region"}, "eu-west-1"),
    ({"Fn::Sub": "${AWS::Partition}:${AWS::URLSuffix}"}, "aws:amazonaws.com"),
])
def test_intrinsic_functions_return_the_guides_example(value, resolved):
    assert resolve(value) == resolved


@pytest.mark.parametrize("condition, picked", [(YES, "when-true"), (NO, "when-false")])
def test_fn_if_takes_its_second_argument_when_true_and_its_third_when_false(condition, picked):
    t = {"Conditions": {"Picked": condition}, "Resources": {}}
    assert Resolver(t).resolve({"Fn::If": ["Picked", "when-true", "when-false"]}) == picked


def test_a_custom_resources_dotted_attribute_is_split_at_the_first_dot():
    # Fn::GetAtt's short form is logicalNameOfResource.attributeName; an attribute name may itself hold dots.
    custom = {"Type": "Custom::Thing"}
    assert resolve({"Fn::GetAtt": "C.Outer.Inner"}, C=custom) == "<Custom::Thing Data.Outer.Inner C>"
    assert resolve({"Fn::Sub": "${C.Outer.Inner}"}, C=custom) == "<Custom::Thing Data.Outer.Inner C>"


def test_equals_compares_a_number_with_its_string_form():
    # Condition values are strings in CloudFormation: 1 and "1" are equal.
    t = {"Conditions": {"One": {"Fn::Equals": [1, "1"]}}, "Resources": {}}
    assert Resolver(t).condition("One") is True


@pytest.mark.parametrize("kind", [
    # CloudFormation User Guide, "Specify existing resources at runtime with CloudFormation-supplied parameter
    # types": every AWS::SSM::Parameter::Value<...> type resolves to the parameter's stored value.
    "AWS::SSM::Parameter::Value<String>", "AWS::SSM::Parameter::Value<List<String>>",
    "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>",
])
def test_every_ssm_parameter_type_is_a_deploy_time_value(kind):
    t = {"Parameters": {"Ami": {"Type": kind, "Default": "/aws/service/eks/optimized-ami"}}, "Resources": {}}
    assert Resolver(t).resolve({"Ref": "Ami"}) == "<Parameter ssm-value Ami>"


def test_a_parameter_without_a_default_stops_the_check_naming_it():
    t = {"Parameters": {"Size": {"Type": "Number"}}, "Resources": {}}
    with pytest.raises(SeamError, match="parameter Size has no default"):
        Resolver(t).resolve({"Ref": "Size"})


@pytest.mark.parametrize("kind, name_property, value, resolved", [
    # "Return values" of each type: a log group's Arn ends in ":*" and its Ref is its name; a bucket's Arn has no
    # region or account; an IAM role's Arn has no region.
    ("AWS::Logs::LogGroup", "LogGroupName", {"Fn::GetAtt": ["X", "Arn"]},
     "arn:aws:logs:eu-west-1:111122223333:log-group:x:*"),
    ("AWS::Logs::LogGroup", "LogGroupName", {"Ref": "X"}, "x"),
    ("AWS::S3::Bucket", "BucketName", {"Fn::GetAtt": ["X", "Arn"]}, "arn:aws:s3:::x"),
    ("AWS::IAM::Role", "RoleName", {"Fn::GetAtt": ["X", "Arn"]}, "arn:aws:iam::111122223333:role/x"),
])
def test_named_return_values(kind, name_property, value, resolved):
    assert resolve(value, X={"Type": kind, "Properties": {name_property: "x"}}) == resolved


def test_a_nodegroups_ref_is_cluster_slash_name_and_its_attributes_its_own_name_and_its_clusters():
    # aws-cdk issue 22442: a nodegroup's Ref is "<cluster>/<nodegroup>"; NodegroupName is the bare name.
    group = {"Type": "AWS::EKS::Nodegroup", "Properties": {"ClusterName": {"Ref": "Cluster"}, "NodegroupName": "gpu"}}
    assert resolve({"Ref": "G"}, G=group) == "demo/gpu"
    assert resolve({"Fn::GetAtt": ["G", "ClusterName"]}, G=group) == "demo"
    assert resolve({"Fn::GetAtt": ["G", "NodegroupName"]}, G=group) == "gpu"
