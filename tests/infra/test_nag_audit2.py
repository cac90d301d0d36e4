"""cdk-nag suppressions: each on the findings it names, and no wider."""

import types

import pytest


def _suppressed(metadata: dict) -> list[str]:
    return sorted(rule["id"] for rule in ((metadata or {}).get("cdk_nag") or {}).get("rules_to_suppress", []))


def _policy_name(arn) -> str:
    """An AWS-managed policy ARN as the template writes it (Fn::Join or Fn::Sub), in cdk-nag's applies_to form."""
    text = "".join(part if isinstance(part, str) else "<AWS::Partition>" for part in arn["Fn::Join"][1]) \
        if "Fn::Join" in arn else arn["Fn::Sub"].replace("${AWS::Partition}", "<AWS::Partition>")
    return f"Policy::{text}"


def test_the_managed_policy_suppression_names_exactly_the_managed_policies_the_stack_attaches(template):
    # AwsSolutions-IAM4 is suppressed policy by policy: a policy attached but not listed is a nag error at synth,
    # and one listed but not attached would hide a policy added later.
    attached = {_policy_name(arn) for role in template.find_resources("AWS::IAM::Role").values()
                for arn in role["Properties"].get("ManagedPolicyArns", [])}
    rules = template.to_json()["Metadata"]["cdk_nag"]["rules_to_suppress"]
    (iam4,) = [rule for rule in rules if rule["id"] == "AwsSolutions-IAM4"]
    assert sorted(iam4["applies_to"]) == sorted(attached)


def test_every_resource_of_the_kubectl_provider_carries_its_suppressions_and_no_other_resource_does(template):
    resources = template.to_json()["Resources"]
    provider = {name for name in resources if name.startswith("EksClusterKubectlProvider")}
    assert {"EksClusterKubectlProviderHandlerDA75FB7A", "EksClusterKubectlProviderframeworkonEvent13CC64B3"} <= provider
    for name in provider:
        assert _suppressed(resources[name].get("Metadata")) == ["AwsSolutions-IAM5", "AwsSolutions-L1"], name
    assert [n for n, r in resources.items() if n not in provider
            and "AwsSolutions-L1" in _suppressed(r.get("Metadata"))] == []


@pytest.fixture(scope="module")
def suppressed_for():
    """The rules suppressed on a bare EKS cluster resource, by endpoint_cidrs_unset (no synthesis of the stack)."""
    import aws_cdk as cdk

    from stacks.nag import add_nag_suppressions

    def run(endpoint_cidrs_unset: bool) -> list[str]:
        stack = cdk.Stack(cdk.App(), "Nag")
        resource = cdk.CfnResource(stack, "Cluster", type="AWS::EKS::Cluster")
        cluster = types.SimpleNamespace(kubectl_provider=cdk.CfnResource(stack, "Provider", type="AWS::Lambda::Function"),
                                        node=types.SimpleNamespace(default_child=resource))
        add_nag_suppressions(stack, cluster, endpoint_cidrs_unset)
        return _suppressed({"cdk_nag": stack.resolve(resource.get_metadata("cdk_nag"))})
    return run


@pytest.mark.parametrize("unset, suppressed", [(True, ["EksV2-EKS1"]), (False, [])])
def test_the_open_endpoint_finding_is_suppressed_only_while_the_cidrs_are_unset(suppressed_for, unset, suppressed):
    # Unset, `make deploy` fills in the deployer's /32; set CIDRs (0.0.0.0/0 on purpose included) are reported.
    assert suppressed_for(unset) == suppressed
