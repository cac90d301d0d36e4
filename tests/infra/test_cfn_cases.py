"""The CloudFormation resolver (tools.seams.cfn), case by case: each condition function's truth table, each
return value's documented form, and the region a template was synthesized for."""

from __future__ import annotations

import pytest

from tests.infra.test_seams_cfn import resolve, template
from tools.seams.cfn import Resolver, resolve_template, template_region

TRUE, FALSE = {"Fn::Equals": ["a", "a"]}, {"Fn::Equals": ["a", "b"]}


@pytest.mark.parametrize("function, args, value", [
    # CloudFormation User Guide, "Condition functions": Fn::And is true when every condition is, Fn::Or when any is.
    ("Fn::And", [TRUE, TRUE], True), ("Fn::And", [TRUE, FALSE], False), ("Fn::And", [FALSE, FALSE], False),
    ("Fn::Or", [TRUE, FALSE], True), ("Fn::Or", [FALSE, FALSE], False), ("Fn::Or", [TRUE, TRUE], True),
    ("Fn::Not", [TRUE], False), ("Fn::Not", [FALSE], True),
])
def test_condition_functions(function, args, value):
    t = {"Conditions": {"Picked": {function: args}}, "Resources": {}}
    assert Resolver(t).condition("Picked") is value


def test_equals_compares_a_parameters_value_as_a_string():
    # Parameter values reach the template as strings: a Number parameter of default 3 equals "3".
    t = {"Parameters": {"Count": {"Type": "Number", "Default": 3}},
         "Conditions": {"Three": {"Fn::Equals": [{"Ref": "Count"}, "3"]}}, "Resources": {}}
    assert Resolver(t).condition("Three") is True
    assert Resolver(t).resolve({"Ref": "Count"}) == "3"


def test_an_ssm_parameter_is_a_deploy_time_value():
    # An AWS::SSM::Parameter::Value<String> parameter resolves at deploy time to the parameter's value, not its
    # default (which is the parameter's name).
    t = {"Parameters": {"Ami": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/aws/service/eks/ami"}},
         "Resources": {}}
    assert Resolver(t).resolve({"Ref": "Ami"}) == "<Parameter ssm-value Ami>"


def test_sub_variables_of_its_own_map_win_over_resources():
    # "Fn::Sub": a variable of the map is used before a parameter or resource of that name.
    assert resolve({"Fn::Sub": ["${Cluster}-x", {"Cluster": "mapped"}]}) == "mapped-x"


def test_no_value_drops_a_list_item():
    assert resolve([1, {"Ref": "AWS::NoValue"}, 2]) == [1, 2]


@pytest.mark.parametrize("kind, name_property, attribute, value", [
    # Each type's "Return values" (CloudFormation User Guide), in eu-west-1 for account 111122223333.
    ("AWS::Lambda::Function", "FunctionName", "Arn", "arn:aws:lambda:eu-west-1:111122223333:function:f"),
    ("AWS::ECR::Repository", "RepositoryName", "RepositoryUri", "111122223333.dkr.ecr.eu-west-1.amazonaws.com/f"),
    ("AWS::ECR::Repository", "RepositoryName", "Arn", "arn:aws:ecr:eu-west-1:111122223333:repository/f"),
    ("AWS::S3::Bucket", "BucketName", "RegionalDomainName", "f.s3.eu-west-1.amazonaws.com"),
    ("AWS::S3::Bucket", "BucketName", "DomainName", "f.s3.amazonaws.com"),
])
def test_return_values(kind, name_property, attribute, value):
    assert resolve({"Fn::GetAtt": ["F", attribute]}, F={"Type": kind, "Properties": {name_property: "f"}}) == value


def test_a_custom_resources_attribute_is_what_its_handler_returns():
    assert resolve({"Fn::GetAtt": ["C", "Value"]}, C={"Type": "Custom::Thing"}) == "<Custom::Thing Data.Value C>"


def asset_template(bucket: str) -> dict:
    return {"Resources": {"Handler": {"Type": "AWS::Lambda::Function", "Properties": {
        "Code": {"S3Bucket": {"Fn::Sub": bucket}, "S3Key": "k.zip"}}}}}


@pytest.mark.parametrize("region", ["eu-west-1", "ap-southeast-2", "us-gov-west-1", "eu-central-1"])
def test_the_region_of_an_environment_specific_synth_is_its_asset_buckets(region):
    # CDK's default synthesizer names the asset bucket cdk-<qualifier>-assets-<account>-<region>.
    bucket = f"cdk-hnb659fds-assets-${{AWS::AccountId}}-{region}"
    assert template_region(asset_template(bucket)) == region
    assert resolve_template(asset_template(bucket)).region == region


def test_an_environment_agnostic_synth_is_read_in_us_east_2_unless_told():
    agnostic = asset_template("cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}")
    assert template_region(agnostic) == "us-east-2"
    assert resolve_template(template(), "eu-west-1").region == "eu-west-1"


@pytest.mark.parametrize("value, resources, resolved", [
    # "Return values" of each type's page: Ref of an add-on is "<cluster>,<addon>", of an access entry
    # "<cluster>|<principal ARN>"; a role's Arn carries its path; a cluster's Arn its name.
    ({"Ref": "A"}, {"A": {"Type": "AWS::EKS::Addon", "Properties": {"ClusterName": {"Ref": "Cluster"}, "AddonName": "vpc-cni"}}},
     "demo,vpc-cni"),
    ({"Ref": "E"}, {"E": {"Type": "AWS::EKS::AccessEntry", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "PrincipalArn": "arn:aws:iam::111122223333:role/admin"}}},
     "demo|arn:aws:iam::111122223333:role/admin"),
    ({"Fn::GetAtt": ["R", "Arn"]}, {"R": {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "r", "Path": "/eks/"}}},
     "arn:aws:iam::111122223333:role/eks/r"),
    ({"Fn::GetAtt": ["Cluster", "Arn"]}, {}, "arn:aws:eks:eu-west-1:111122223333:cluster/demo"),
    ({"Fn::GetAtt": ["G", "Arn"]}, {"G": {"Type": "AWS::EKS::Nodegroup", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "NodegroupName": "gpu"}}},
     "arn:aws:eks:eu-west-1:111122223333:nodegroup/demo/gpu/<uuid>"),
    ({"Ref": "P"}, {"P": {"Type": "AWS::EC2::PlacementGroup", "Properties": {"GroupName": "pg"}}}, "pg"),
    ({"Fn::GetAtt": ["K", "Arn"]}, {"K": {"Type": "AWS::KMS::Key", "Properties": {}}},
     "arn:aws:kms:eu-west-1:111122223333:key/<AWS::KMS::Key key-id K>"),
    ({"Ref": "S"}, {"S": {"Type": "AWS::SSM::Parameter", "Properties": {"Name": "/eks/ami", "Type": "String"}}}, "/eks/ami"),
    ({"Fn::GetAtt": ["V", "CidrBlock"]}, {"V": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}},
     "10.0.0.0/16"),
])
def test_refs_and_arns_as_cloudformation_returns_them(value, resources, resolved):
    assert resolve(value, **resources) == resolved
