"""The security model on the synthesized template and manifests: who can reach what, and with which rights."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Annotations, Match

from cdk_constructs import network_policies as np
from cdk_constructs.kuberay_rules import violations
from stacks.context import settings_from_context
from stacks.settings import SettingsError
from tests.conftest import base_context, only, resources_of, synth_stack, template_for
from tests.infra.test_cluster_software import manifest_of, manifests, ray_cluster_of


@pytest.fixture(scope="module")
def cluster(template):
    return ray_cluster_of(manifest_of(template, "RayJob"))


def containers(cluster: dict) -> list[dict]:
    return [cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0],
            cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]]


def pod_specs(cluster: dict) -> list[dict]:
    return [cluster["spec"]["headGroupSpec"]["template"]["spec"], cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]]


# ------------------------------------------------------------------ 1. Ray accepts code only with its token


def test_ray_token_authentication_is_on_and_valid_for_kuberay(cluster, template):
    assert cluster["spec"]["authOptions"] == {"mode": "token"}
    assert cluster["spec"]["rayVersion"] == "2.58.0"
    assert violations([cluster, manifest_of(template, "RayJob")]) == []


def test_a_ray_version_kuberay_refuses_for_token_auth_is_refused_at_synth():
    with pytest.raises(SettingsError, match=r"training.ray_version: '2.51.0' must be the image's Ray version, 2.52.0 or later"):
        settings_from_context(base_context() | {"training.ray_version": "2.51.0"})


def test_the_vpc_cni_enforces_network_policies_with_its_own_role(template):
    [addon] = [a for a in resources_of(template, "AWS::EKS::Addon").values() if a["Properties"]["AddonName"] == "vpc-cni"]
    assert json.loads(addon["Properties"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    [association] = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    role = template.to_json()["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert any("AmazonEKS_CNI_Policy" in json.dumps(p) for p in role["ManagedPolicyArns"])


def test_nodes_join_after_the_cni_has_its_credentials(template):
    resources = template.to_json()["Resources"]
    [cni] = [k for k, a in resources_of(template, "AWS::EKS::Addon").items() if a["Properties"]["AddonName"] == "vpc-cni"]
    for group in resources_of(template, "AWS::EKS::Nodegroup").values():
        assert cni in group["DependsOn"]


def test_training_namespace_denies_ingress_by_default(template):
    deny = manifest_of(template, "NetworkPolicy", "default-deny-ingress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []}


def policies() -> list[dict]:
    """Built when a test runs, not at import (under `make mutation` a mutant is switched on only then)."""
    return np.training_network_policies("training", "kuberay-system")


POLICIES = policies()
HEAD = np.Pod("training", {"ray.io/is-ray-node": "yes", "ray.io/node-type": "head", "ray.io/cluster": "fsdp-1"})
WORKER = np.Pod("training", {"ray.io/is-ray-node": "yes", "ray.io/node-type": "worker", "ray.io/cluster": "fsdp-1"})
OPERATOR = np.Pod("kuberay-system", {"app.kubernetes.io/name": "kuberay-operator"})
SUBMITTER = np.Pod("training", {"ray.io/originated-from-crd": "RayJob", "job-name": "ft-1"})
STRANGER_HERE = np.Pod("training", {"app": "debug"})
STRANGER_ELSEWHERE = np.Pod("default", {"app": "web"})
IMPOSTOR = np.Pod("default", {"app.kubernetes.io/name": "kuberay-operator"})  # right label, wrong namespace

REACH = [
    (OPERATOR, HEAD, 8265, True),       # the operator polls job status on the dashboard
    (SUBMITTER, HEAD, 8265, True),      # `ray job submit` from the RayJob's submitter pod
    (WORKER, HEAD, 6379, True),         # GCS
    (HEAD, WORKER, 40000, True),        # raylets, object store, NCCL bootstrap
    (WORKER, WORKER, 12345, True),
    (OPERATOR, HEAD, 6379, False),      # the operator gets the job API only
    (OPERATOR, WORKER, 8265, False),
    (SUBMITTER, WORKER, 8265, False),
    (SUBMITTER, HEAD, 10001, False),    # no Ray client for the submitter
    (STRANGER_HERE, HEAD, 8265, False),
    (STRANGER_ELSEWHERE, HEAD, 8265, False),
    (STRANGER_ELSEWHERE, WORKER, 6379, False),
    (IMPOSTOR, HEAD, 8265, False),
]


@pytest.mark.parametrize("source,target,port,allowed", REACH)
def test_who_reaches_the_ray_pods(source, target, port, allowed):
    assert np.ingress_allowed(policies(), source, target, port) is allowed


def test_the_synthesized_policies_are_the_ones_judged(template):
    synthesized = [m for m in manifests(template) if m["kind"] == "NetworkPolicy"]
    for policy in synthesized:  # aws-cdk-lib adds its prune label; the rules are ours
        policy["metadata"].pop("labels")
    assert synthesized == POLICIES


def test_without_the_operator_rule_the_operator_is_cut_off():
    """The evaluator can say no: drop the head rule and KubeRay could no longer follow its jobs."""
    without = [p for p in policies() if p["metadata"]["name"] != "ray-head-job-api"]
    assert not np.ingress_allowed(without, OPERATOR, HEAD, 8265)
    assert np.ingress_allowed([], OPERATOR, HEAD, 8265)  # no policy at all: everything is open


# ------------------------------------------------------------------ 2. no node credentials in pods


def test_ray_pods_know_their_region_without_instance_metadata(cluster):
    for container in containers(cluster):
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-2"
        assert env["RAY_USAGE_STATS_ENABLED"] == "0"


def test_node_roles_have_no_cni_rights_and_pull_only_ecr(template):
    groups = resources_of(template, "AWS::EKS::Nodegroup").values()
    roles = template.to_json()["Resources"]
    for group in groups:
        role = roles[group["Properties"]["NodeRole"]["Fn::GetAtt"][0]]["Properties"]
        names = {json.dumps(p).split("policy/")[1].split('"')[0] for p in role["ManagedPolicyArns"]}
        assert names == {"AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly"}


# ------------------------------------------------------------------ 3. no hidden admins


def test_the_cluster_creator_gets_no_hidden_admin_entry(template):
    access = only(template, "AWS::EKS::Cluster")["Properties"]["AccessConfig"]
    assert access == {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": False}


def test_the_kubectl_handler_keeps_only_its_lambda_policies(template):
    role = next(r for k, r in resources_of(template, "AWS::IAM::Role").items() if "KubectlProviderHandlerServiceRole" in k)
    policies = json.dumps(role["Properties"]["ManagedPolicyArns"])
    assert "AWSLambdaBasicExecutionRole" in policies and "AWSLambdaVPCAccessExecutionRole" in policies
    assert "ContainerRegistry" not in policies
    assert "Conditions" not in template.to_json()


@pytest.mark.parametrize("namespace,service_account", [("training", "ray"), ("kube-system", "aws-node")])
def test_pod_identity_roles_trust_one_service_account_of_this_cluster(template, namespace, service_account):
    trusting = [r["Properties"]["AssumeRolePolicyDocument"] for r in resources_of(template, "AWS::IAM::Role").values()
                if "pods.eks.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
                and f'"{service_account}"' in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    [document] = trusting
    [statement] = document["Statement"]
    assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    conditions = statement["Condition"]["StringEquals"]
    assert conditions["aws:RequestTag/kubernetes-namespace"] == namespace
    assert conditions["aws:RequestTag/kubernetes-service-account"] == service_account
    assert conditions["aws:RequestTag/eks-cluster-name"] == "EksFsdpEfa"
    assert conditions["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}


def test_no_admin_warns_that_nobody_can_reach_the_cluster():
    Annotations.from_stack(synth_stack()).has_warning("*", Match.string_like_regexp("No person has access to the cluster"))


# ------------------------------------------------------------------ 4. the API endpoint


def test_unset_endpoint_cidrs_stay_open_with_a_warning(template):
    vpc_config = only(template, "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is True and "PublicAccessCidrs" not in vpc_config
    Annotations.from_stack(synth_stack()).has_warning("*", Match.string_like_regexp("reachable from 0.0.0.0/0"))


def test_explicit_cidrs_reach_the_cluster_without_the_warning():
    template = template_for(endpoint_public_cidrs=["198.51.100.7/32"])
    assert only(template, "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]["PublicAccessCidrs"] == ["198.51.100.7/32"]
    Annotations.from_stack(synth_stack(endpoint_public_cidrs=["198.51.100.7/32"])).has_no_warning(
        "*", Match.string_like_regexp("reachable from 0.0.0.0/0"))


def test_public_cidrs_with_a_private_endpoint_are_refused():
    with pytest.raises(SettingsError, match=r"endpoint_public_cidrs: a private endpoint has no public CIDRs"):
        settings_from_context(base_context() | {"endpoint_access": "private", "endpoint_public_cidrs": ["1.2.3.4/32"]})


# ------------------------------------------------------------------ 5. pods and supply chain


def test_training_namespace_enforces_baseline_and_warns_restricted(template):
    labels = manifest_of(template, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.36"


def test_ray_containers_drop_every_capability_and_escalation(cluster):
    for container in containers(cluster):
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    for spec in pod_specs(cluster):
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}


def mounts_api_token(pod: dict, accounts: dict[str, dict]) -> bool:
    """Kubernetes' rule (ServiceAccount admission, "Opt out of API credential automounting"): the pod's
    automountServiceAccountToken wins, else its account's, else the token is mounted."""
    if pod.get("automountServiceAccountToken") is not None:
        return pod["automountServiceAccountToken"]
    account = accounts[pod.get("serviceAccountName") or "default"]
    return account.get("automountServiceAccountToken", True)


def test_no_pod_of_the_job_gets_a_kubernetes_api_token(template, cluster):
    """Head, workers and submitter: Ray and `ray job submit` read nothing in the API (KubeRay's token mode
    passes the Ray token as a Secret reference), and EKS Pod Identity mounts its own projected token
    (amazon-eks-pod-identity-webhook pkg/handler/handler.go getPodSpecPatch)."""
    accounts = {m["metadata"]["name"]: m for m in manifests(template)
                if m["kind"] == "ServiceAccount" and m["metadata"]["namespace"] == "training"}
    assert accounts["ray"]["automountServiceAccountToken"] is False and accounts["default"]["automountServiceAccountToken"] is False
    submitter = manifest_of(template, "RayJob")["spec"]["submitterPodTemplate"]["spec"]
    for pod in pod_specs(cluster) + [submitter]:
        assert mounts_api_token(pod, accounts) is False
        assert mounts_api_token({k: v for k, v in pod.items() if k != "automountServiceAccountToken"}, accounts) is False


def test_the_token_rule_mounts_one_when_nothing_says_no():
    assert mounts_api_token({"serviceAccountName": "ray"}, {"ray": {}}) is True
    assert mounts_api_token({"serviceAccountName": "ray", "automountServiceAccountToken": True},
                            {"ray": {"automountServiceAccountToken": False}}) is True


def test_the_pods_still_get_aws_credentials_through_pod_identity(template):
    [association] = [a for a in resources_of(template, "AWS::EKS::PodIdentityAssociation").values()
                     if a["Properties"]["Namespace"] == "training"]
    assert association["Properties"]["ServiceAccount"] == "ray"
    assert all(pod["serviceAccountName"] == "ray" for pod in pod_specs(ray_cluster_of(manifest_of(template, "RayJob"))))


def test_the_submitter_pod_is_hardened_like_the_ray_pods(template):
    pod = manifest_of(template, "RayJob")["spec"]["submitterPodTemplate"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["nodeSelector"] == {"role": "system"}


def test_hf_token_comes_from_a_secret_reference_never_a_value():
    cluster = ray_cluster_of(manifest_of(template_for(training={"hf_token_secret": "hf-token"}), "RayJob"))
    for container in containers(cluster):
        [token] = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
        assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}


def test_no_hf_token_env_unless_asked(cluster):
    assert all(e["name"] != "HF_TOKEN" for c in containers(cluster) for e in c["env"])


def test_bad_hf_token_secret_name_is_refused():
    with pytest.raises(SettingsError, match=r"training.hf_token_secret: 'HF Token' must be a Kubernetes Secret name"):
        settings_from_context(base_context() | {"training.hf_token_secret": "HF Token"})


def test_model_revision_reaches_the_trainer_and_silences_the_warning():
    revision = "8faed761d45a263340a0528343f099c05c9a4323"
    stack = synth_stack(training={"model_revision": revision})
    assert f"--model-revision={revision}" in json.dumps(stack.training.ray_job_manifest["spec"]["entrypoint"])
    Annotations.from_stack(stack).has_no_warning("*", Match.string_like_regexp("has no model_revision"))


def test_hub_model_without_revision_warns():
    Annotations.from_stack(synth_stack()).has_warning(
        "*", Match.string_like_regexp("training.model Qwen/Qwen2.5-1.5B has no model_revision"))


def test_every_log_group_is_encrypted_with_the_logs_key(template):
    groups = resources_of(template, "AWS::Logs::LogGroup").values()
    keys = {json.dumps(g["Properties"]["KmsKeyId"]) for g in groups}
    # control plane, flow logs, 3 Lambdas, 4 Container Insights groups (tests/infra/test_observability.py)
    assert len(groups) == 9 and len(keys) == 1 and "LogsKey" in keys.pop()


# ------------------------------------------------------------------ what the consumers of these rules really do


class LabelledNamespacePod(np.Pod):
    """A pod whose namespace carries the labels the API server really sets, written out here (not np's constant):
    every namespace gets kubernetes.io/metadata.name = its name (Kubernetes 1.22+, "Well-Known Labels, Annotations
    and Taints": https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-metadata-name)."""

    def namespace_labels(self) -> dict:
        return {"kubernetes.io/metadata.name": self.namespace}


def test_the_operator_is_let_in_by_the_label_kubernetes_puts_on_its_namespace():
    operator = LabelledNamespacePod("kuberay-system", {"app.kubernetes.io/name": "kuberay-operator"})
    elsewhere = LabelledNamespacePod("default", {"app.kubernetes.io/name": "kuberay-operator"})
    assert np.ingress_allowed(policies(), operator, HEAD, 8265)
    assert not np.ingress_allowed(policies(), elsewhere, HEAD, 8265)
    [rule] = manifest_of_policies("ray-head-job-api")["spec"]["ingress"]
    assert rule["from"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}


def manifest_of_policies(name: str) -> dict:
    return next(p for p in policies() if p["metadata"]["name"] == name)


def _ray_role_actions(template, objects: bool) -> set[str]:
    """The S3 actions the `ray` account's role has on the bucket's objects (objects=True) or on the bucket."""
    roles = [k for k, r in resources_of(template, "AWS::IAM::Role").items()
             if '"ray"' in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    [role] = roles
    actions = set()
    for policy in resources_of(template, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if ("/*" in json.dumps(statement["Resource"])) is objects:
                    actions |= set(statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
    return actions


def test_the_ray_role_may_delete_the_checkpoints_the_trainer_retires(template):
    """The trainer keeps 2 committed checkpoints (training/checkpoint.py: KEEP) and deletes older ones and the
    partial ones they supersede itself (retire -> storage.remove_folder: pyarrow's delete_dir, S3 DeleteObject(s)),
    as Ray Train's num_to_keep did before; without the permission every checkpoint would stay in the bucket,
    billed. Writing needs PutObject and the multipart calls of large shards; resuming needs GetObject."""
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"} <= _ray_role_actions(template, True)
    import inspect

    from training import checkpoint

    assert checkpoint.KEEP == 2 and "remove_folder(" in inspect.getsource(checkpoint.retire)


def test_the_ray_role_may_list_the_run_folder(template):
    """Resuming lists the run's checkpoint folders (storage.scan_checkpoints, Ray Train's own state): pyarrow's
    FileSelector is S3 ListObjectsV2, which IAM authorises as s3:ListBucket on the bucket (Amazon S3 API
    Reference, ListObjectsV2, "Permissions"); without it S3 also answers 403 instead of 404 for a missing key."""
    assert "s3:ListBucket" in _ray_role_actions(template, False)


def test_the_policies_in_full():
    """What `kubectl get networkpolicy -n training -o yaml` should show, written out."""
    ray_node, head = {"ray.io/is-ray-node": "yes"}, {"ray.io/node-type": "head"}
    meta = lambda name: {"name": name, "namespace": "training"}  # noqa: E731
    assert policies() == [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta("default-deny-ingress"),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta("ray-nodes-from-each-other"),
         "spec": {"podSelector": {"matchLabels": ray_node}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": ray_node}}]}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta("ray-head-job-api"),
         "spec": {"podSelector": {"matchLabels": head}, "policyTypes": ["Ingress"], "ingress": [{
             "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}},
                       "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}}},
                      {"podSelector": {"matchLabels": {"ray.io/originated-from-crd": "RayJob"}}}],
             "ports": [{"protocol": "TCP", "port": 8265}]}]}},
    ]


def test_the_evaluator_fills_in_what_the_api_server_defaults():
    """Kubernetes API reference, NetworkPolicySpec.policyTypes: unset, every policy affects ingress;
    NetworkPolicyPort.protocol: unset, TCP. An ipBlock peer is for traffic from outside the cluster: pods are
    judged by pod and namespace selectors (the NetworkPolicy concept page: ipBlock "cluster-external IPs")."""
    bare = {"metadata": {"name": "p", "namespace": "training"},
            "spec": {"podSelector": {"matchLabels": {"ray.io/node-type": "head"}},
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"ray.io/is-ray-node": "yes"}}}],
                                  "ports": [{"port": 6379}]}]}}
    assert np.ingress_allowed([bare], WORKER, HEAD, 6379)
    assert not np.ingress_allowed([bare], WORKER, HEAD, 6379, protocol="UDP")
    assert not np.ingress_allowed([bare], STRANGER_HERE, HEAD, 6379)  # selected, so isolated
    by_address = {"metadata": {"name": "q", "namespace": "training"},
                  "spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}}
    assert not np.ingress_allowed([by_address], WORKER, HEAD, 6379)
    with pytest.raises(ValueError, match=r"^selector \{'matchExpressions': \[\]\} uses more than matchLabels$"):
        np.ingress_allowed([dict(bare, spec=dict(bare["spec"], podSelector={"matchExpressions": []}))], WORKER, HEAD, 6379)


def test_an_egress_only_policy_or_another_protocol_lets_nothing_in():
    """An Egress-only policy does not isolate the pod for ingress; a UDP port admits no TCP."""
    egress = {"metadata": {"name": "e", "namespace": "training"},
              "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": []}}
    assert np.ingress_allowed([egress], STRANGER_ELSEWHERE, HEAD, 8265)
    udp = {"metadata": {"name": "u", "namespace": "training"},
           "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"protocol": "UDP", "port": 8265}]}]}}
    assert not np.ingress_allowed([udp], WORKER, HEAD, 8265)
    assert np.ingress_allowed([udp], WORKER, HEAD, 8265, protocol="UDP")
