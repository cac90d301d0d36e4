"""GPU nodes from zero: the node group, Cluster Autoscaler's chart and rights, and its template node.

The template node is rebuilt here from what the autoscaler reads (cloudprovider/aws at tag
cluster-autoscaler-1.36.1 of kubernetes/autoscaler): capacity from its instance table
(ec2_instance_types.go), and, for a managed node group (ASG tags eks:cluster-name and
eks:nodegroup-name), the group's labels, taints and resource tags from DescribeNodegroup
(aws_manager.go buildNodeFromTemplate, aws_wrapper.go getManagedNodegroupInfo). The group's side is
read from the synthesized AWS::EKS::Nodegroup, so a change to what we deploy shows up here.
"""

from __future__ import annotations

import copy
import json

import pytest

from cdk_constructs import cluster_autoscaler as ca
from cdk_constructs import node_groups
from tests.conftest import only, resources_of, synth_stack, template_for
from tests.infra.test_cluster_software import helm_chart, manifest_of

# ec2_instance_types.go at cluster-autoscaler-1.36.1: "g6.12xlarge": VCPU 48, MemoryMb 196608, GPU 4;
# "p5.48xlarge": VCPU 192, MemoryMb 2097152, GPU 8.
CA_TABLE = {"g6.12xlarge": (48, 196608, 4), "p5.48xlarge": (192, 2097152, 8)}


def gpu_group(template) -> dict:
    return only(template, "AWS::EKS::Nodegroup", lambda r: r["Properties"]["Labels"].get("role") == "gpu-worker")["Properties"]


def described(group: dict) -> dict:
    """What DescribeNodegroup returns for the synthesized group (the EKS API's shape)."""
    return {"labels": group["Labels"], "tags": group.get("Tags", {}),
            "taints": [{"key": t["Key"], "value": t["Value"], "effect": t["Effect"]} for t in group.get("Taints") or []]}


def worker_pod(template) -> dict:
    return manifest_of(template, "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]


def node_for(template, instance_type="g6.12xlarge", change=lambda d: None) -> dict:
    seen = described(gpu_group(template))
    change(seen)
    return ca.template_node(*CA_TABLE[instance_type], seen, "EksFsdpEfa", "gpu")


# ------------------------------------------------------------------ the template node and the worker pod


def test_the_template_node_takes_the_worker_pod(template):
    assert ca.unschedulable_reasons(node_for(template), worker_pod(template)) == []


def test_the_p5_template_node_takes_its_worker_pod():
    template = template_for(gpu_instance_type="p5.48xlarge")
    node = node_for(template, "p5.48xlarge")
    assert node["status"]["allocatable"]["vpc.amazonaws.com/efa"] == "32"
    assert ca.unschedulable_reasons(node, worker_pod(template)) == []


def test_without_the_efa_tag_the_autoscaler_would_never_start_a_node(template):
    node = node_for(template, change=lambda d: d["tags"].pop(ca.RESOURCE_TAG_PREFIX + "vpc.amazonaws.com/efa"))
    assert ca.unschedulable_reasons(node, worker_pod(template)) == [
        "vpc.amazonaws.com/efa: requests 1, the template node offers none"]


def test_a_lower_efa_count_on_the_template_fails(template):
    pod = copy.deepcopy(worker_pod(template))
    for kind in ("requests", "limits"):
        pod["containers"][0]["resources"][kind]["vpc.amazonaws.com/efa"] = "2"
    assert ca.unschedulable_reasons(node_for(template), pod) == [
        "vpc.amazonaws.com/efa: requests 2, the template node offers 1"]


def test_a_missing_gpu_label_fails(template):
    node = node_for(template, change=lambda d: d["labels"].pop("nvidia.com/gpu.present"))
    assert ca.unschedulable_reasons(node, worker_pod(template)) == [
        "nodeSelector nvidia.com/gpu.present=true: the template node has nvidia.com/gpu.present=None"]


def test_a_different_taint_fails(template):
    node = node_for(template, change=lambda d: d["taints"][0].update(value="l4"))
    assert ca.unschedulable_reasons(node, worker_pod(template)) == ["taint nvidia.com/gpu=l4:NoSchedule is not tolerated"]


def test_a_pod_needing_more_memory_than_the_instance_table_fails(template):
    pod = copy.deepcopy(worker_pod(template))
    pod["containers"][0]["resources"]["requests"]["memory"] = "193Gi"  # 196608 MiB = 192 GiB
    assert ca.unschedulable_reasons(node_for(template), pod) == [
        "memory: requests 193Gi, the template node offers 196608Mi"]


def test_the_template_node_in_full():
    group = {"labels": {"role": "gpu-worker"}, "tags": {ca.RESOURCE_TAG_PREFIX + "vpc.amazonaws.com/efa": "1", "project": "x"},
             "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]}
    assert ca.template_node(48, 196608, 4, group, "c", "ng") == {
        "metadata": {"labels": {"cluster-name": "c", "nodegroup-name": "ng", "eks.amazonaws.com/nodegroup": "ng",
                                "role": "gpu-worker"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "48", "memory": "196608Mi", "nvidia.com/gpu": "4", "pods": "110",
                                   "vpc.amazonaws.com/efa": "1"}}}


@pytest.mark.parametrize("toleration,tolerated", [
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
    ({"operator": "Exists"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
])
def test_toleration_matching_follows_kubernetes(toleration, tolerated):
    """Kubernetes' rule (Taints and Tolerations): an empty key with Exists matches every taint, an empty effect every effect."""
    node = {"metadata": {"labels": {}}, "status": {"allocatable": {}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]}}
    assert (ca.unschedulable_reasons(node, {"tolerations": [toleration]}) == []) is tolerated


@pytest.mark.parametrize("effect,blocks", [("NoSchedule", True), ("NoExecute", True), ("PreferNoSchedule", False)])
def test_only_hard_taint_effects_keep_an_untolerating_pod_off_the_node(effect, blocks):
    """Kubernetes' TaintToleration filter (pkg/scheduler/framework/plugins/tainttoleration) filters on NoSchedule and
    NoExecute taints; PreferNoSchedule is a soft preference, only scored."""
    node = {"metadata": {"labels": {}}, "status": {"allocatable": {}},
            "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": effect}]}}
    expected = [f"taint dedicated=ml:{effect} is not tolerated"] if blocks else []
    assert ca.unschedulable_reasons(node, {"tolerations": []}) == expected


def test_the_stack_refuses_a_group_the_autoscaler_cannot_start_for_the_workers(monkeypatch):
    monkeypatch.setattr(node_groups, "gpu_node_tags", lambda spec: {})
    with pytest.raises(ValueError, match=r"template node cannot take the Ray worker pod: vpc.amazonaws.com/efa: "
                                         r"requests 1, the template node offers none"):
        synth_stack()


# ------------------------------------------------------------------ the node group


def test_the_gpu_group_is_created_empty_and_may_grow_to_gpu_node_count(template):
    assert gpu_group(template)["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 2}
    assert gpu_group(template)["Labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-l4"


def test_without_scale_to_zero_the_gpu_nodes_are_fixed_and_no_autoscaler_runs():
    template = template_for(gpu_scale_to_zero=False)
    assert gpu_group(template)["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    assert not [r for r in resources_of(template, "Custom::AWSCDK-EKS-HelmChart").values()
                if r["Properties"]["Chart"] == "cluster-autoscaler"]


def test_the_system_group_stays_fixed(template):
    system = only(template, "AWS::EKS::Nodegroup", lambda r: r["Properties"]["Labels"].get("role") == "system")
    assert system["Properties"]["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1}


# ------------------------------------------------------------------ the chart and its rights


def test_chart_pinned_to_the_1_36_autoscaler_on_the_system_node(template):
    chart = helm_chart(template, "cluster-autoscaler")
    assert (chart["Repository"], chart["Version"], chart["Namespace"]) == (
        "https://kubernetes.github.io/autoscaler", "9.59.0", "kube-system")
    values = chart["Values"]
    assert values["image"] == {"tag": "v1.36.1"} and values["nodeSelector"] == {"role": "system"}
    assert (values["cloudProvider"], values["awsRegion"], values["autoDiscovery"]) == (
        "aws", "us-east-2", {"clusterName": "EksFsdpEfa"})
    assert values["rbac"]["serviceAccount"]["name"] == "cluster-autoscaler"


def test_scale_down_delay_setting_reaches_the_autoscaler():
    default = helm_chart(template_for(), "cluster-autoscaler")["Values"]["extraArgs"]
    assert (default["scale-down-unneeded-time"], default["scale-down-delay-after-add"]) == ("5m", "5m")
    changed = helm_chart(template_for(gpu_scale_down_delay_minutes=12), "cluster-autoscaler")["Values"]["extraArgs"]
    assert (changed["scale-down-unneeded-time"], changed["scale-down-delay-after-add"]) == ("12m", "12m")


def _blocks_scale_down(pod: dict, extra_args: dict) -> bool:
    """Cluster Autoscaler's FAQ ("What types of pods can prevent CA from removing a node?"): a pod with local
    storage (an emptyDir or hostPath volume) keeps its node, unless --skip-nodes-with-local-storage=false
    (its default is true)."""
    local = any("emptyDir" in v or "hostPath" in v for v in pod.get("volumes", []))
    return local and extra_args.get("skip-nodes-with-local-storage", "true") != "false"


def test_the_workers_emptydir_volumes_do_not_keep_a_gpu_node(template):
    pod = worker_pod(template)
    assert any("emptyDir" in v for v in pod["volumes"])  # /dev/shm and the model cache
    assert not _blocks_scale_down(pod, helm_chart(template, "cluster-autoscaler")["Values"]["extraArgs"])


@pytest.mark.parametrize("change,message", [
    ({"kubernetes_version": "1.35"}, r"^cluster autoscaler: v1.36.1 is the release for Kubernetes 1.36, the cluster runs 1.35$"),
    ({"scale_down_delay_minutes": 0}, r"^cluster autoscaler: scale-down delay 0 min is not 1 to 1440$"),
])
def test_the_construct_refuses_what_it_cannot_run(change, message):
    stack = synth_stack()
    props = dict(cluster=stack.cluster, cluster_name="EksFsdpEfa", region="us-east-2",
                 gpu_nodegroup=stack.gpu_nodes.nodegroup, gpu_instance=stack.gpu_nodes.spec,
                 gpu_nodegroup_described=stack.gpu_nodes.described, pending_pod=stack.training.worker_pod)
    with pytest.raises(ValueError, match=message):
        ca.ClusterAutoscaler(stack, "Other", ca.ClusterAutoscalerProps(**props | change))


def _statements(template, namespace="kube-system", account="cluster-autoscaler") -> list[dict]:
    [association] = [a["Properties"] for a in resources_of(template, "AWS::EKS::PodIdentityAssociation").values()
                     if (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"]) == (namespace, account)]
    role = association["RoleArn"]["Fn::GetAtt"][0]
    [policy] = [p["Properties"] for p in resources_of(template, "AWS::IAM::Policy").values()
                if {"Ref": role} in p["Properties"]["Roles"]]
    return policy["PolicyDocument"]["Statement"]


def test_the_autoscaler_may_resize_only_this_clusters_gpu_group(template):
    writes = [s for s in _statements(template) if any(not a.split(":")[1].startswith(("Describe", "Get"))
                                                      for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]
    assert len(writes) == 1
    [write] = writes
    assert sorted(write["Action"]) == ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]
    condition = write["Condition"]["StringEquals"]
    assert condition["aws:ResourceTag/eks:cluster-name"] == "EksFsdpEfa"


def test_the_nodegroup_tag_condition_is_the_bare_name_eks_tags_the_asg_with(template):
    """EKS tags the group's ASG eks:nodegroup-name=<bare name>. CloudFormation's Ref of AWS::EKS::Nodegroup is
    `<cluster>/<nodegroup>` (AWS::EKS::Nodegroup return values; aws-cdk issue 22442), GetAtt NodegroupName the
    bare name: a condition on the Ref never matches, and every scale-up would be denied."""
    [gpu_id] = [k for k, r in resources_of(template, "AWS::EKS::Nodegroup").items()
                if r["Properties"]["Labels"].get("role") == "gpu-worker"]
    [write] = [s for s in _statements(template) if "autoscaling:SetDesiredCapacity" in s["Action"]]
    assert write["Condition"]["StringEquals"]["aws:ResourceTag/eks:nodegroup-name"] == {
        "Fn::GetAtt": [gpu_id, "NodegroupName"]}


def test_the_autoscaler_reads_only_the_gpu_groups_description(template):
    [describe] = [s for s in _statements(template) if s["Action"] == "eks:DescribeNodegroup"]
    assert "GpuNodes" in json.dumps(describe["Resource"])


def test_the_autoscaler_role_trusts_only_its_service_account(template):
    roles = [r["Properties"] for r in resources_of(template, "AWS::IAM::Role").values()
             if "cluster-autoscaler" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    [role] = roles
    condition = role["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert condition["aws:RequestTag/kubernetes-namespace"] == "kube-system"
    assert condition["aws:RequestTag/kubernetes-service-account"] == "cluster-autoscaler"
