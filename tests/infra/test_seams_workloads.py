"""Each workload's AWS calls judged against the synthesized policies (tools.seams.workloads)."""

from __future__ import annotations

import copy

import pytest

from tools.seams import workloads as w
from tools.seams.cfn import ACCOUNT, Resolver, SeamError


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


def test_the_autoscaler_may_resize_the_gpu_group(calls):
    """Issue 30 defect 1 (fixed): the writes' eks:nodegroup-name condition holds the bare name (GetAtt)."""
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


# ---------------------------------------------------------------- the experiment tracker's calls (training/tracking.py)

SERVER = "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team"
APP = "arn:aws:sagemaker:us-east-2:123456789012:mlflow-app/app-0a1b2c3d"


def tracked_job(arguments: str, worker_env: tuple = ()) -> dict:
    """The parts of a RayJob tracking_calls reads: the entrypoint, the pods' service account, the workers' env."""
    def pod(env):
        return {"template": {"spec": {"serviceAccountName": "ray", "containers": [{"env": list(env)}]}}}
    return {"kind": "RayJob", "metadata": {"namespace": "training"},
            "spec": {"entrypoint": "python -m training.train " + arguments,
                     "rayClusterSpec": {"headGroupSpec": pod(()), "workerGroupSpecs": [pod(worker_env)]}}}


def tracking_denials(statements: list[dict], job: dict) -> list[w.Denial]:
    return denied({"Resources": pod_identity_role("training", "ray", statements)},
                  lambda r: w.tracking_calls(r, [job]))


def test_the_ray_pods_may_make_every_mlflow_call_the_trainer_makes_on_their_tracking_server():
    from tests.conftest import template_for
    from tests.infra.test_checks import VARIANTS
    from tools.seams import kube
    from training.tracking import MLFLOW_OPERATIONS

    resolved = Resolver(template_for(**VARIANTS["p5-capacity-block"]).to_json(), "us-east-2")
    judged = w.tracking_calls(resolved, [obj for _, obj, _ in kube.manifests(resolved)])
    assert sorted(c.request.action for c in judged) == sorted(f"sagemaker-mlflow:{op}" for op in MLFLOW_OPERATIONS.values())
    assert {c.request.resource for c in judged} == {SERVER} and w.denials(judged) == []


def test_mlflow_calls_on_another_tracking_server_are_denied():
    grant = [{"Effect": "Allow", "Action": "sagemaker-mlflow:*", "Resource": SERVER.replace("/team", "/other")}]
    found = tracking_denials(grant, tracked_job(f"--tracking=mlflow --mlflow-tracking-uri={SERVER}"))
    assert len(found) == 7 and "implicitly denied" in found[0].line()


def test_an_mlflow_app_is_called_as_sagemaker_and_needs_call_mlflow_app_api():
    """The plugin signs an app's requests for the service sagemaker: the sagemaker-mlflow actions alone allow nothing."""
    from cdk_constructs.tracking_access import MLFLOW_ACTIONS, MLFLOW_APP_ACTION

    job = tracked_job(f"--tracking=mlflow --mlflow-tracking-uri={APP}")
    assert len(tracking_denials([{"Effect": "Allow", "Action": list(MLFLOW_ACTIONS), "Resource": APP}], job)) == 7
    assert tracking_denials([{"Effect": "Allow", "Action": [*MLFLOW_ACTIONS, MLFLOW_APP_ACTION], "Resource": APP}], job) == []


def test_a_secret_granted_by_its_bare_name_is_not_the_secret_the_pods_read():
    """Secrets Manager appends six characters to the name in the ARN: a grant without -?????? matches no secret."""
    job = tracked_job("--tracking=wandb", [{"name": "WANDB_API_KEY_SECRET", "value": "wandb-key"}])
    bare = f"arn:aws:secretsmanager:us-east-2:{ACCOUNT}:secret:wandb-key"
    [denial] = tracking_denials([{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": bare}], job)
    assert denial.call.request.resource == bare + "-AbCdEf"
    assert tracking_denials([{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": bare + "-??????"}],
                            job) == []


def test_an_http_tracker_and_no_tracker_make_no_aws_call():
    assert w.tracking_calls(Resolver({"Resources": pod_identity_role("training", "ray", [])}, "us-east-2"),
                            [tracked_job("--tracking=mlflow --mlflow-tracking-uri=http://mlflow:5000")]) == []


def granted(mlflow_tracking_uri: str | None, wandb_api_key_secret: str | None = None) -> list[dict]:
    """The statements grant_tracking_access gives a role, as CloudFormation gets them."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    from cdk_constructs.tracking_access import grant_tracking_access

    stack = Stack(App(), "Tracking")
    role = iam.Role(stack, "Ray", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    grant_tracking_access(role, mlflow_tracking_uri, wandb_api_key_secret)
    [policy] = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    return policy["Properties"]["PolicyDocument"]["Statement"]


@pytest.mark.parametrize("uri", [SERVER, APP], ids=["tracking server", "MLflow App"])
def test_the_pods_role_allows_every_call_the_trainer_makes_on_its_tracking_server_or_app(uri):
    """What the stack grants, judged as IAM evaluates it against the trainer's calls: on an app they are
    sagemaker:CallMlflowAppApi (the plugin signs for the service sagemaker), on a tracking server the
    sagemaker-mlflow actions, which alone hold no app action."""
    statements = granted(uri)
    assert tracking_denials(statements, tracked_job(f"--tracking=mlflow --mlflow-tracking-uri={uri}")) == []
    assert ("sagemaker:CallMlflowAppApi" in statements[0]["Action"]) == (uri == APP)


def test_the_wandb_grant_reads_the_secret_named_and_no_other_that_starts_the_same():
    """Secrets Manager appends six characters to a secret's name in its ARN; IAM's '?' matches one character: the
    grant for wandb-key reads wandb-key-AbCdEf, not the secret wandb-key-prod (wandb-key-prod-AbCdEf)."""
    statements = granted(None, "wandb-key")
    for name, denied_calls in (("wandb-key", 0), ("wandb-key-prod", 1)):
        job = tracked_job("--tracking=wandb", [{"name": "WANDB_API_KEY_SECRET", "value": name}])
        assert len(tracking_denials(statements, job)) == denied_calls, name
