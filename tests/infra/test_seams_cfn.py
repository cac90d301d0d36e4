"""The CloudFormation resolver of the seam harness: Ref and Fn::GetAtt per type, intrinsic functions
(worked examples from the CloudFormation User Guide's "Intrinsic function reference")."""

from __future__ import annotations

import pytest

from tools.seams.cfn import Resolver, SeamError


def template(**resources) -> dict:
    return {"Resources": {"Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}}, **resources}}


NODEGROUP = {"Type": "AWS::EKS::Nodegroup", "Properties": {"ClusterName": {"Ref": "Cluster"}}}


def resolve(value, **resources):
    return Resolver(template(**resources), "eu-west-1").resolve(value)


# aws-cdk issue 22442: "The result of myNodegroup.nodegroupName is something like mycluster/mynodegroup",
# i.e. CloudFormation's Ref of AWS::EKS::Nodegroup; DescribeNodegroup refuses it, the bare name is NodegroupName.
def test_a_named_nodegroups_ref_is_cluster_slash_name_and_its_attribute_the_bare_name():
    named = {**NODEGROUP, "Properties": {**NODEGROUP["Properties"], "NodegroupName": "gpu"}}
    assert resolve({"Ref": "Gpu"}, Gpu=named) == "demo/gpu"
    assert resolve({"Fn::GetAtt": ["Gpu", "NodegroupName"]}, Gpu=named) == "gpu"


def test_an_unnamed_nodegroups_ref_differs_from_its_generated_name():
    ref, name = resolve([{"Ref": "Gpu"}, {"Fn::GetAtt": ["Gpu", "NodegroupName"]}], Gpu=NODEGROUP)
    assert ref == f"demo/{name}" and name.startswith("<AWS::EKS::Nodegroup generated-name Gpu")


def test_an_unknown_resource_type_fails_loudly():
    with pytest.raises(SeamError, match=r"Thing: no Ref return value known for AWS::Foo::Bar"):
        resolve({"Ref": "Thing"}, Thing={"Type": "AWS::Foo::Bar"})


def test_an_unknown_attribute_fails_loudly():
    with pytest.raises(SeamError, match=r"no Fn::GetAtt Color known for AWS::EKS::Nodegroup"):
        resolve({"Fn::GetAtt": ["Gpu", "Color"]}, Gpu=NODEGROUP)


def test_an_unknown_intrinsic_fails_loudly():
    with pytest.raises(SeamError, match=r"Fn::ImportValue is not modelled"):
        resolve({"Fn::ImportValue": "shared-vpc"})


# "Fn::Join": !Join [ ":", [ a, b, c ] ] returns "a:b:c".
def test_join():
    assert resolve({"Fn::Join": [":", ["a", "b", "c"]]}) == "a:b:c"


# "Fn::Select": !Select [ "1", [ "apples", "grapes", "oranges", "mangoes" ] ] returns "grapes".
def test_select():
    assert resolve({"Fn::Select": ["1", ["apples", "grapes", "oranges", "mangoes"]]}) == "grapes"


# "Fn::Split": !Split [ "|" , "a|b|c" ] returns ["a", "b", "c"].
def test_split():
    assert resolve({"Fn::Split": ["|", "a|b|c"]}) == ["a", "b", "c"]


# "Fn::Sub": pseudo parameters, a resource's Ref and attribute, a variable map, and ${!Literal}.
def test_sub_with_pseudo_parameters_resources_variables_and_literals():
    text = "arn:${AWS::Partition}:eks:${AWS::Region}:${AWS::AccountId}:cluster/${Cluster} ${Cluster.Arn} ${x} ${!y}"
    got = resolve({"Fn::Sub": [text, {"x": "1"}]})
    assert got == ("arn:aws:eks:eu-west-1:111122223333:cluster/demo arn:aws:eks:eu-west-1:111122223333:cluster/demo "
                   "1 ${y}")


def test_if_picks_by_the_condition_and_no_value_drops_the_key():
    t = {**template(), "Parameters": {"Env": {"Type": "String", "Default": "prod"}},
         "Conditions": {"IsProd": {"Fn::Equals": [{"Ref": "Env"}, "prod"]}}}
    r = Resolver(t, "eu-west-1")
    assert r.resolve({"a": {"Fn::If": ["IsProd", "big", "small"]}, "b": {"Ref": "AWS::NoValue"}}) == {"a": "big"}


# AWS::Logs::LogGroup, Return values: Arn "arn:aws:logs:us-west-1:123456789012:log-group:/mystack-testgroup-12ABC1AHYI:*".
def test_a_log_groups_arn_ends_with_colon_star():
    group = {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/app"}}
    assert resolve({"Fn::GetAtt": ["G", "Arn"]}, G=group) == "arn:aws:logs:eu-west-1:111122223333:log-group:/app:*"


# AWS::S3::Bucket, Return values: Arn "arn:aws:s3:::amzn-s3-demo-bucket" (no region, no account).
def test_a_buckets_arn_has_no_region_or_account():
    bucket = {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "amzn-s3-demo-bucket"}}
    assert resolve({"Fn::GetAtt": ["B", "Arn"]}, B=bucket) == "arn:aws:s3:::amzn-s3-demo-bucket"


# AWS::IAM::Role, Return values: Ref the role's name, Arn arn:aws:iam::<account>:role/<path><name>.
def test_a_roles_ref_is_its_name_and_arn_has_no_region():
    role = {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "ca", "Path": "/eks/"}}
    assert resolve([{"Ref": "R"}, {"Fn::GetAtt": ["R", "Arn"]}], R=role) == ["ca", "arn:aws:iam::111122223333:role/eks/ca"]


def test_the_whole_synthesized_template_resolves(template):
    synthesized = template.to_json()
    r = Resolver(synthesized, "us-east-2")
    for logical_id in synthesized["Resources"]:
        r.properties(logical_id)  # raises SeamError on any type, attribute or function the table lacks
