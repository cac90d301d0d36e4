"""Each workload's AWS calls judged against the synthesized policies (tools.seams.workloads)."""

from __future__ import annotations

import copy

import pytest

from tools.seams import workloads as w
from tools.seams.cfn import Resolver, SeamError

DEPLOYFIX = "fixed on branch deployfix"


@pytest.fixture(scope="module")
def synthesized(template) -> Resolver:
    return Resolver(template.to_json(), "us-east-2")


@pytest.fixture(scope="module")
def calls(synthesized) -> list[w.Call]:
    from tools.seams import kube
    return w.all_calls(synthesized, [obj for _, obj, _ in kube.manifests(synthesized)])


def pod_identity_role(namespace: str, service_account: str, statements: list[dict]) -> dict:
    trust = {"Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                            "Action": ["sts:AssumeRole", "sts:TagSession"]}]}
    return {
        "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": trust}},
        "RolePolicy": {"Type": "AWS::IAM::Policy", "Properties": {
            "PolicyName": "p", "Roles": [{"Ref": "Role"}], "PolicyDocument": {"Statement": statements}}},
        "Association": {"Type": "AWS::EKS::PodIdentityAssociation", "Properties": {
            "ClusterName": {"Ref": "Cluster"}, "Namespace": namespace, "ServiceAccount": service_account,
            "RoleArn": {"Fn::GetAtt": ["Role", "Arn"]}}},
    }


def autoscaler_template(nodegroup_name_value) -> dict:
    """The autoscaler's writes limited by the ASG's eks:nodegroup-name tag set to `nodegroup_name_value`."""
    statements = [{"Effect": "Allow", "Action": list(w.AUTOSCALER_READS), "Resource": "*"},
                  {"Effect": "Allow", "Action": "eks:DescribeNodegroup", "Resource": {"Fn::GetAtt": ["Gpu", "Arn"]}},
                  {"Effect": "Allow", "Action": ["autoscaling:SetDesiredCapacity",
                                                 "autoscaling:TerminateInstanceInAutoScalingGroup"],
                   "Resource": "*", "Condition": {"StringEquals": {"aws:ResourceTag/eks:nodegroup-name": nodegroup_name_value}}}]
    return {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
        "Gpu": {"Type": "AWS::EKS::Nodegroup", "Properties": {
            "ClusterName": {"Ref": "Cluster"}, "ScalingConfig": {"MinSize": 0, "MaxSize": 2, "DesiredSize": 0}}},
        **pod_identity_role("kube-system", "cluster-autoscaler", statements)}}


def denied(template: dict, calls_of) -> list[w.Denial]:
    return w.denials(calls_of(Resolver(template, "us-east-2")))


def test_a_tag_condition_on_the_nodegroups_ref_denies_the_scale_up_and_names_the_statement():
    [scale_up, scale_down] = denied(autoscaler_template({"Ref": "Gpu"}), w.autoscaler_calls)
    assert scale_up.call.request.action == "autoscaling:SetDesiredCapacity"
    assert scale_down.call.request.action == "autoscaling:TerminateInstanceInAutoScalingGroup"
    line = scale_up.line()
    assert line.startswith("IAM: Cluster Autoscaler calls autoscaling:SetDesiredCapacity on arn:aws:autoscaling:")
    assert "RolePolicy statement 2" in line and "'demo/<AWS::EKS::Nodegroup generated-name Gpu>'" in line


def test_a_tag_condition_on_the_bare_nodegroup_name_allows_it():
    assert denied(autoscaler_template({"Fn::GetAtt": ["Gpu", "NodegroupName"]}), w.autoscaler_calls) == []


def test_a_group_of_fixed_size_is_never_resized():
    t = autoscaler_template({"Ref": "Gpu"})
    t["Resources"]["Gpu"]["Properties"]["ScalingConfig"] = {"MinSize": 1, "MaxSize": 1, "DesiredSize": 1}
    assert denied(t, w.autoscaler_calls) == []


def test_an_add_on_of_unknown_namespace_fails_loudly():
    t = autoscaler_template({"Ref": "Gpu"})
    t["Resources"]["Addon"] = {"Type": "AWS::EKS::Addon", "Properties": {
        "AddonName": "mystery", "ClusterName": {"Ref": "Cluster"},
        "PodIdentityAssociations": [{"ServiceAccount": "x", "RoleArn": {"Fn::GetAtt": ["Role", "Arn"]}}]}}
    with pytest.raises(SeamError, match=r"the namespace of add-on mystery is not in ADDON_NAMESPACES"):
        w.pod_identity_roles(Resolver(t, "us-east-2"))


def test_a_trust_policy_without_tag_session_denies_pod_identity():
    t = autoscaler_template({"Ref": "Gpu"})
    t["Resources"]["Role"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Action"] = "sts:AssumeRole"
    [denial] = denied(t, w.pod_identity_calls)
    assert denial.call.request.action == "sts:TagSession" and denial.call.workload == "Pod Identity for kube-system/cluster-autoscaler"


def test_a_private_ecr_image_needs_the_nodes_pull_rights():
    t = {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
        "NodeRole": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": []},
                     "ManagedPolicyArns": ["arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"]}},
        "Nodes": {"Type": "AWS::EKS::Nodegroup", "Properties": {"ClusterName": {"Ref": "Cluster"},
                                                                "NodeRole": {"Fn::GetAtt": ["NodeRole", "Arn"]}}}}}
    image = "111122223333.dkr.ecr.us-east-2.amazonaws.com/ray/train:v1"
    found = w.denials(w.node_calls(Resolver(t, "us-east-2"), [image]))
    assert {d.call.request.action for d in found} == {"ecr:GetAuthorizationToken", "ecr:BatchGetImage",
                                                       "ecr:GetDownloadUrlForLayer"}
    assert found[1].call.request.resource == "arn:aws:ecr:us-east-2:111122223333:repository/ray/train"
    t["Resources"]["NodeRole"]["Properties"]["ManagedPolicyArns"].append(
        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly")
    assert w.denials(w.node_calls(Resolver(t, "us-east-2"), [image])) == []


def test_a_public_image_needs_no_iam():
    assert w.ecr_repository_arn("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1") is None


# ---------------------------------------------------------------- the synthesized stack

# Cluster Autoscaler's README at tag cluster-autoscaler-1.36.1 (cluster-autoscaler/cloudprovider/aws/README.md
# lines 34-69, "Full Cluster Autoscaler Features Policy (Recommended)"), every action of both blocks; the
# scale-from-zero reads among them: ec2:DescribeLaunchTemplateVersions, ec2:GetInstanceTypesFromInstanceRequirements,
# eks:DescribeNodegroup.
README_FULL_POLICY_READS = [
    "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities", "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions", "ec2:GetInstanceTypesFromInstanceRequirements",
    "eks:DescribeNodegroup"]
README_FULL_POLICY_WRITES = ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]


def autoscaler_decisions(calls, actions) -> dict[str, bool]:
    from tools.seams.iam import evaluate
    judged = {}
    for call in calls:
        if call.workload == "Cluster Autoscaler" and call.request.action in actions:
            judged[call.request.action] = evaluate(list(call.policies), call.request).allowed
    return judged


def test_the_autoscaler_role_holds_every_read_of_its_readme_policy(calls):
    assert autoscaler_decisions(calls, README_FULL_POLICY_READS) == {a: True for a in README_FULL_POLICY_READS}


@pytest.mark.xfail(strict=True, reason=DEPLOYFIX)
def test_the_autoscaler_may_resize_the_gpu_group(calls):
    """Issue 30 defect 1: the writes' eks:nodegroup-name condition holds the group's Ref (cluster/name)."""
    assert autoscaler_decisions(calls, README_FULL_POLICY_WRITES) == {a: True for a in README_FULL_POLICY_WRITES}


def test_every_pod_identity_role_trusts_the_pod_identity_service_with_its_session_tags(calls):
    judged = [c for c in calls if c.workload.startswith("Pod Identity for ")]
    assert {c.workload for c in judged} == {
        "Pod Identity for kube-system/cluster-autoscaler", "Pod Identity for training/ray",
        "Pod Identity for kube-system/aws-node", "Pod Identity for amazon-cloudwatch/cloudwatch-agent"}
    assert w.denials(judged) == []


def test_the_ray_pods_read_and_write_their_checkpoints(calls):
    judged = [c for c in calls if c.workload == "Ray pods"]
    assert len(judged) == 7 and w.denials(judged) == []


def test_the_bucket_refuses_the_ray_pods_over_plain_http(calls):
    over_http = [w.Call(c.workload, c.source, w.Request(c.request.principal, c.request.action, c.request.resource,
                                                        {"aws:SecureTransport": "false"}), c.policies)
                 for c in calls if c.workload == "Ray pods"]
    assert all("explicitly denied by TrainingCheckpointsPolicy" in d.decision.reason for d in w.denials(over_http))
    assert len(w.denials(over_http)) == len(over_http)


def test_the_observability_agents_kubectl_handler_and_nodes_are_allowed(calls):
    judged = [c for c in calls if c.workload in ("CloudWatch agent", "Fluent Bit", "kubectl handler",
                                                 "kubectl provider framework") or c.workload.startswith("node group ")]
    assert {c.workload for c in judged} >= {"CloudWatch agent", "Fluent Bit", "kubectl handler"}
    assert w.denials(judged) == []


def test_a_removed_scale_from_zero_read_is_a_denial(synthesized):
    t = copy.deepcopy(synthesized.template)
    role = w.pod_identity_roles(synthesized)[("kube-system", "cluster-autoscaler")]
    [policy] = [res["Properties"]["PolicyDocument"] for res in t["Resources"].values()
                if res["Type"] == "AWS::IAM::Policy" and {"Ref": role} in res["Properties"]["Roles"]]
    for statement in policy["Statement"]:
        if isinstance(statement["Action"], list) and "ec2:GetInstanceTypesFromInstanceRequirements" in statement["Action"]:
            statement["Action"].remove("ec2:GetInstanceTypesFromInstanceRequirements")
    found = [d for d in w.denials(w.autoscaler_calls(Resolver(t, "us-east-2")))
             if d.call.request.action == "ec2:GetInstanceTypesFromInstanceRequirements"]
    assert len(found) == 1
