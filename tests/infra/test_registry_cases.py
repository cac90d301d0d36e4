"""ECR's side of the seam (tools.seams.registry), case by case on small templates: each row holds both sides of a
rule, so a one-line slip in the harness fails here (the synthesized stack's own case is test_seams_registry)."""

from __future__ import annotations

import json

import pytest

from tools.seams import registry
from tools.seams.cfn import Resolver, SeamError

HERE = "111122223333.dkr.ecr.us-east-2.amazonaws.com"


@pytest.mark.parametrize("path, repository", [
    ("ecr-public/dlc/ray:v1", "ecr-public/dlc/ray"),
    ("ecr-public/dlc/ray@sha256:0a1b", "ecr-public/dlc/ray"),
    ("ecr-public/dlc/ray:v1@sha256:0a1b", "ecr-public/dlc/ray"),
    ("ecr-public/dlc/ray", "ecr-public/dlc/ray"),
])
def test_the_repository_of_an_image_drops_its_tag_and_its_digest(path, repository):
    # An image reference is name[:tag][@digest] (distribution/reference grammar); the cache creates the repository
    # `name`, and the node's pull rights are judged on it.
    assert registry.Pull("chart values", f"{HERE}/{path}").repository == repository


def test_a_root_prefix_rule_is_refused_as_not_modelled():
    # ECR's prefix ROOT caches every repository of the registry: the harness does not model it, so it stops
    # rather than read "ROOT" as a folder name that serves nothing.
    t = {"Resources": {"Rule": {"Type": "AWS::ECR::PullThroughCacheRule", "Properties": {
        "EcrRepositoryPrefix": "ROOT", "UpstreamRegistryUrl": "public.ecr.aws"}}}}
    with pytest.raises(SeamError, match=r"Rule: pull-through cache rule with prefix ROOT is not modelled"):
        registry.rules(Resolver(t))


def _template_pulling(*images: str) -> dict:
    """A node group, its role (no policy), a cache rule for ecr-public/ and an add-on that pulls `images`."""
    return {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
        "NodeRole": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": []}}},
        "Nodes": {"Type": "AWS::EKS::Nodegroup", "Properties": {
            "ClusterName": {"Ref": "Cluster"}, "NodeRole": {"Fn::GetAtt": ["NodeRole", "Arn"]}}},
        "Rule": {"Type": "AWS::ECR::PullThroughCacheRule", "Properties": {
            "EcrRepositoryPrefix": "ecr-public", "UpstreamRegistryUrl": "public.ecr.aws"}},
        "Addon": {"Type": "AWS::EKS::Addon", "Properties": {
            "AddonName": "amazon-cloudwatch-observability", "ClusterName": {"Ref": "Cluster"},
            "ConfigurationValues": json.dumps({"images": list(images)})}}}}


def test_only_a_pull_a_rule_here_serves_is_imported_through_the_cache():
    """The first pull of a cached image imports it (ecr:BatchImportUpstreamImage, ecr:CreateRepository); an image
    no rule serves, or one in another region's registry, is never imported here: its failure is the missing rule,
    reported once by problems(), not a denial of an import that never happens."""
    cached = f"{HERE}/ecr-public/cloudwatch-agent/cloudwatch-agent:1.3"
    uncached = f"{HERE}/k8s/autoscaling/cluster-autoscaler:v1.36.1"
    elsewhere = "111122223333.dkr.ecr.eu-west-1.amazonaws.com/ecr-public/cloudwatch-agent/cloudwatch-agent:1.3"
    calls = registry.import_calls(Resolver(_template_pulling(cached, uncached, elsewhere)))
    assert sorted((c.request.action, c.request.resource) for c in calls) == [
        ("ecr:BatchImportUpstreamImage", "arn:aws:ecr:us-east-2:111122223333:repository/ecr-public/cloudwatch-agent/cloudwatch-agent"),
        ("ecr:CreateRepository", "arn:aws:ecr:us-east-2:111122223333:repository/ecr-public/cloudwatch-agent/cloudwatch-agent")]


def test_an_image_without_a_source_is_judged_only_on_its_rule():
    """Without an image-source annotation there is no upstream to compare: an image a rule serves passes."""
    assert registry.problems(Resolver(_template_pulling(f"{HERE}/ecr-public/cloudwatch-agent/cloudwatch-agent:1.3"))) == []
