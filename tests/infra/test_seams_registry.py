"""ECR's side of the seam (tools/seams/registry.py): the synthesized template, edited the ways a real deploy would
break, must fail the harness for that reason (Amazon ECR User Guide, "Pulling an image with a pull through cache
rule" and "IAM permissions required to sync an upstream registry with an Amazon ECR private registry")."""

from __future__ import annotations

import copy
import json

import pytest

from tools.seams import check_template, registry
from tools.seams.cfn import Resolver

REGISTRY = "111122223333.dkr.ecr.us-east-2.amazonaws.com"
CACHED = f"{REGISTRY}/ecr-public/deep-learning-containers/ray:train-ml-cuda-v1.1"


@pytest.fixture
def synthesized(template) -> dict:
    """The default deployment's template, a copy each test may edit."""
    return copy.deepcopy(template.to_json())


def of_type(t: dict, kind: str) -> dict[str, dict]:
    return {lid: res for lid, res in t["Resources"].items() if res["Type"] == kind}


def the_rule(t: dict) -> dict:
    [rule] = of_type(t, "AWS::ECR::PullThroughCacheRule").values()
    return rule["Properties"]


def test_the_synthesized_cache_passes(synthesized):
    r = Resolver(synthesized)
    assert [(p.image, p.source) for p in registry.pulls(r)] == [
        (CACHED, "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1")]
    assert registry.problems(r) == []


def test_the_rule_deleted_leaves_the_pods_image_with_no_repository(synthesized):
    [lid] = of_type(synthesized, "AWS::ECR::PullThroughCacheRule")
    del synthesized["Resources"][lid]
    [problem] = check_template(synthesized)
    assert problem.startswith("ECR: RayJob training/ft-") and problem.endswith(
        f"pulls {CACHED}: no pull-through cache rule's prefix begins repository "
        "ecr-public/deep-learning-containers/ray (rules: none), so nothing creates it and the pull fails")


def test_a_prefix_the_pods_do_not_pull_under_is_found(synthesized):
    the_rule(synthesized)["EcrRepositoryPrefix"] = "ecr-public-cache"
    [problem] = check_template(synthesized)
    assert "no pull-through cache rule's prefix begins repository ecr-public/deep-learning-containers/ray " \
           "(rules: ecr-public-cache/ -> public.ecr.aws)" in problem


def test_a_prefix_that_begins_the_repository_name_only_as_text_serves_no_pull():
    """CreatePullThroughCacheRule: "There is always an assumed / applied to the end of the prefix": prefix ecr serves
    ecr/..., never ecr-public/... (an image named in a chart's values carries no source to catch it otherwise)."""
    pull = registry.Pull("Helm chart values", CACHED)
    text_prefix = registry.Rule("TextPrefix", "ecr", "public.ecr.aws")
    serving = registry.Rule("Serving", "ecr-public", "public.ecr.aws")
    assert registry.rule_of(pull, [text_prefix]) is None
    assert registry.rule_of(pull, [text_prefix, serving]) == serving


def test_of_two_rules_that_serve_a_repository_the_longer_prefix_is_its_rule():
    """ecr-public/ and ecr-public/deep-learning-containers/ both begin the Ray image's repository: the more specific
    rule, fetching from another upstream, is the one the path and the upstream are judged against, in either order."""
    pull = registry.Pull("Helm chart values", CACHED)
    broad = registry.Rule("Broad", "ecr-public", "public.ecr.aws")
    specific = registry.Rule("Specific", "ecr-public/deep-learning-containers", "public.ecr.aws/deep-learning-containers")
    assert registry.rule_of(pull, [broad, specific]) == specific and registry.rule_of(pull, [specific, broad]) == specific


def test_the_import_rights_removed_from_the_node_roles_deny_each_nodes_first_pull(synthesized):
    for policy in of_type(synthesized, "AWS::IAM::Policy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        statements[:] = [s for s in statements if "ecr:BatchImportUpstreamImage" not in s["Action"]]
    problems = check_template(synthesized)
    assert len(problems) == 4  # two node groups x two actions
    assert all(p.startswith("IAM: node group EksClusterNodegroup") for p in problems)
    assert {p.split(" calls ")[1].split(" on ")[0] for p in problems} == {"ecr:BatchImportUpstreamImage",
                                                                           "ecr:CreateRepository"}
    assert all("repository/ecr-public/deep-learning-containers/ray: implicitly denied" in p
               and "IAM permissions required to sync an upstream registry" in p for p in problems)


def test_import_rights_on_another_prefix_do_not_cover_the_cached_repository(synthesized):
    for policy in of_type(synthesized, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "ecr:CreateRepository" in statement["Action"]:
                statement["Resource"]["Fn::Join"][1][-1] = ":repository/docker-hub/*"
    assert len(check_template(synthesized)) == 4


def test_a_rule_fetching_from_another_registry_than_the_images_source_is_found(synthesized):
    the_rule(synthesized)["UpstreamRegistryUrl"] = "registry-1.docker.io"
    [problem] = check_template(synthesized)
    assert problem.endswith("which rule ImageCacheRule010CDD6E fetches from registry-1.docker.io/deep-learning-"
                            "containers/ray:train-ml-cuda-v1.1, not the image's source public.ecr.aws/deep-learning-"
                            "containers/ray:train-ml-cuda-v1.1 (\"Pulling an image with a pull through cache rule\")")


def test_a_cached_path_that_is_not_the_sources_is_found(synthesized):
    [manifest] = [m["Properties"] for m in of_type(synthesized, "Custom::AWSCDK-EKS-KubernetesResource").values()
                  if "/ecr-public/deep-learning-containers/ray:" in json.dumps(m)]
    text = json.dumps(manifest["Manifest"]).replace("/ecr-public/deep-learning-containers/ray:", "/ecr-public/ray:")
    manifest["Manifest"] = json.loads(text)
    problems = [p for p in check_template(synthesized) if p.startswith("ECR: ")]
    assert len(problems) == 1 and "fetches from public.ecr.aws/ray:train-ml-cuda-v1.1, not the image's source" in problems[0]


def test_a_charts_image_in_the_accounts_registry_needs_a_rule(synthesized):
    [chart] = [c for c in of_type(synthesized, "Custom::AWSCDK-EKS-HelmChart").values()
               if c["Properties"]["Chart"] == "cluster-autoscaler"]
    values = json.loads(chart["Properties"]["Values"])
    values["image"]["repository"] = {"Fn::Join": ["", [{"Ref": "AWS::AccountId"}, ".dkr.ecr.us-east-2.",
                                                       {"Ref": "AWS::URLSuffix"}, "/k8s/autoscaling/cluster-autoscaler"]]}
    # The chart's values as CloudFormation gets them: the JSON text with the account joined in.
    chart["Properties"]["Values"] = {"Fn::Join": ["", [p for p in _joined_json(values)]]}
    [problem] = [p for p in check_template(synthesized) if p.startswith("ECR: ")]
    assert problem.startswith("ECR: Helm chart cluster-autoscaler values (ClusterAutoscalerChart")
    assert "repository k8s/autoscaling/cluster-autoscaler (rules: ecr-public/ -> public.ecr.aws)" in problem


def _joined_json(values: dict) -> list:
    """JSON text of `values` as Fn::Join parts, the one Fn::Join value spliced in as CDK renders a token."""
    marker = "@@ACCOUNT_IMAGE@@"
    join = values["image"]["repository"]
    text = json.dumps({**values, "image": {**values["image"], "repository": marker}})
    before, after = text.split(marker)
    return [before, *join["Fn::Join"][1], after]


def test_an_add_ons_image_in_another_regions_registry_is_found_though_a_rule_here_has_its_prefix():
    """The stack's cache rule (ecr-public/) exists in its own region only: an image under that prefix in eu-west-1's
    registry has no rule there."""
    t = {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
        "Rule": {"Type": "AWS::ECR::PullThroughCacheRule", "Properties": {
            "EcrRepositoryPrefix": "ecr-public", "UpstreamRegistryUrl": "public.ecr.aws"}},
        "Addon": {"Type": "AWS::EKS::Addon", "Properties": {
            "AddonName": "amazon-cloudwatch-observability", "ClusterName": {"Ref": "Cluster"},
            "ConfigurationValues": json.dumps({"agent": {"image": "111122223333.dkr.ecr.eu-west-1.amazonaws.com/"
                                                                  "ecr-public/cloudwatch-agent/cloudwatch-agent:1.3"}})}}}}
    assert registry.problems(Resolver(t)) == [
        "ECR: add-on amazon-cloudwatch-observability configuration (Addon) pulls 111122223333.dkr.ecr.eu-west-1."
        "amazonaws.com/ecr-public/cloudwatch-agent/cloudwatch-agent:1.3: a registry in eu-west-1, where this stack "
        "(in us-east-2) creates no pull-through cache rule"]


def test_the_registry_policy_may_grant_the_import_instead_of_the_role(synthesized):
    # "IAM permissions required to sync an upstream registry": both rights may come from the registry's policy.
    for policy in of_type(synthesized, "AWS::IAM::Policy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        statements[:] = [s for s in statements if "ecr:BatchImportUpstreamImage" not in s["Action"]]
    roles = [{"Fn::GetAtt": [lid, "Arn"]} for lid in of_type(synthesized, "AWS::IAM::Role") if "NodeRole" in lid]
    synthesized["Resources"]["RegistryPolicy"] = {"Type": "AWS::ECR::RegistryPolicy", "Properties": {"PolicyText": {
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": roles}, "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
            "Resource": {"Fn::Join": ["", ["arn:aws:ecr:us-east-2:", {"Ref": "AWS::AccountId"}, ":repository/ecr-public/*"]]}}]}}}
    assert len(roles) == 2 and check_template(synthesized) == []


def test_a_rule_property_the_harness_does_not_model_stops_the_check(synthesized):
    from tools.seams.cfn import SeamError

    the_rule(synthesized)["UpstreamRepositoryPrefix"] = "deep-learning-containers"
    with pytest.raises(SeamError, match=r"pull-through cache rule with \['UpstreamRepositoryPrefix'\] is not modelled"):
        check_template(synthesized)
