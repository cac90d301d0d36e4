"""stacks/training_cluster.py's wiring: each setting reaches the prop of its own construct, not its neighbour's.

The stack passes some thirty settings to ten constructs; a swapped pair (the system nodes' count for the GPU
nodes'), a negated flag or a neighbouring setting would synthesize cleanly. One synthesis with every value moved
off its default and all values distinct (the cached CHANGED template), plus the default one for the flags' other
side. Expected values are the literals of CHANGED and the instance's published figures (g6.12xlarge: 4 L4 GPUs,
1 EFA interface), not values recomputed by the stack.
"""

from __future__ import annotations

import shlex

import pytest

from tests.conftest import UNDER_MUTATION, resources_of
from tests.infra.test_cluster_software import manifest_of
from tests.infra.test_stack_settings_reach_the_template import (  # noqa: F401 - changed, ray_job: its fixtures
    JOB_LIMIT_FIELDS, changed, gpu_nodegroup, launch_template_of, ray_job, spec_field, system_nodegroup,
    worker_container)

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def chart_values(template, chart: str) -> dict:
    import json

    [values] = [r["Properties"]["Values"] for r in resources_of(template, "Custom::AWSCDK-EKS-HelmChart").values()
                if r["Properties"]["Chart"] == chart]
    return json.loads(values) if isinstance(values, str) else values


@pytest.mark.parametrize("group,instance_types,max_size,disk_gib", [
    (system_nodegroup, ["m7i.2xlarge"], 2, 120),
    (gpu_nodegroup, ["g6.12xlarge"], 4, 300),
])
def test_each_node_group_gets_its_own_instance_type_count_and_disk(changed, group, instance_types, max_size, disk_gib):
    props = group(changed)
    assert props["InstanceTypes"] == instance_types
    assert props["ScalingConfig"]["MaxSize"] == max_size
    [mapping] = launch_template_of(changed, props)["BlockDeviceMappings"]
    assert mapping["Ebs"]["VolumeSize"] == disk_gib


def test_the_system_nodes_are_on_demand_whatever_the_gpu_capacity_type(changed):
    # gpu_capacity_type is spot here: it names the GPU group's capacity, never the system nodes'.
    assert gpu_nodegroup(changed)["CapacityType"] == "SPOT"
    assert system_nodegroup(changed).get("CapacityType", "ON_DEMAND") == "ON_DEMAND"


@pytest.mark.parametrize("resource,quantity", [
    ("nvidia.com/gpu", "4"),  # g6.12xlarge's 4 L4s
    ("vpc.amazonaws.com/efa", "1"),  # its one EFA interface
    ("cpu", "40"),  # of 48 vCPUs, the rest left to the kubelet and the node's daemons
    ("memory", "160Gi"),  # of 192 GiB
])
def test_a_worker_pod_asks_for_the_gpu_instances_resources(ray_job, resource, quantity):
    resources = worker_container(ray_job)["resources"]
    assert resources["requests"][resource] == quantity
    assert resources["limits"][resource] == quantity


def _tolerates_gpu_taint(tolerations) -> bool:
    return any(t.get("key") == "nvidia.com/gpu" for t in tolerations or [])


@pytest.mark.parametrize("taint", [True, False])
def test_gpu_node_taint_decides_the_tolerations_of_the_workers_and_both_device_plugins(template, changed, taint):
    """gpu_node_taint is off in CHANGED and on by default: a worker or plugin that tolerates a taint the nodes lack, or
    lacks the toleration of one they carry, has its flag negated or taken from elsewhere."""
    tpl = template if taint else changed
    assert ("Taints" in gpu_nodegroup(tpl)) is taint
    pod = manifest_of(tpl, "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert _tolerates_gpu_taint(pod.get("tolerations")) is taint
    for chart in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        assert _tolerates_gpu_taint(chart_values(tpl, chart).get("tolerations")) is taint, chart


@pytest.mark.parametrize("path,value", [
    *JOB_LIMIT_FIELDS,
    (("rayClusterSpec", "rayVersion"), "2.59.0"),  # training.ray_version
    (("rayClusterSpec", "workerGroupSpecs", 0, "replicas"), 4),  # gpu_node_count
    (("rayClusterSpec", "workerGroupSpecs", 0, "template", "spec", "terminationGracePeriodSeconds"), 150),
])
def test_each_job_setting_reaches_its_own_rayjob_field(ray_job, path, value):
    assert spec_field(ray_job, path) == value


def test_the_two_secrets_reach_the_workers_under_their_own_names(ray_job):
    env = {e["name"]: e for e in worker_container(ray_job)["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert env["WANDB_API_KEY_SECRET"]["value"] == "team/wandb-key"


def test_rerun_and_region_reach_the_trainer(ray_job):
    args = shlex.split(ray_job["spec"]["entrypoint"])
    assert [a for a in args if a.startswith("--run-name=")][0].endswith("-r2")
    assert {"name": "AWS_REGION", "value": "us-west-2"} in worker_container(ray_job)["env"]


def test_the_autoscaler_finds_this_clusters_groups_in_its_region_and_waits_its_delay(changed):
    values = chart_values(changed, "cluster-autoscaler")
    assert values["awsRegion"] == "us-west-2"
    assert values["autoDiscovery"]["clusterName"] == "OtherName"
    assert values["extraArgs"]["scale-down-unneeded-time"] == "7m"



def test_the_gpu_nodes_and_their_price_are_in_the_gpu_zone_not_the_first_zone(changed):
    """gpu_availability_zone auto resolves to us-west-2c (the first cached zone the VPC has); the VPC's first zone is
    us-west-2a, whose spot price is 2.0311, not 1.7124."""
    group = gpu_nodegroup(changed)
    [subnet] = group["Subnets"]
    assert changed.to_json()["Resources"][subnet["Ref"]]["Properties"]["AvailabilityZone"] == "us-west-2c"
    [metadata] = [r["Metadata"] for r in resources_of(changed, "AWS::EKS::Nodegroup").values()
                  if r["Properties"]["AmiType"] == "AL2023_x86_64_NVIDIA"]
    assert metadata["eks-fsdp-efa:price"]["usd_per_hour"] == 1.7124


@pytest.mark.parametrize("group", [system_nodegroup, gpu_nodegroup])
def test_both_node_roles_may_fill_the_pull_through_cache(changed, group):
    """The kubelet pulls with its node's role (ECR's credential provider); the first pull of an image creates the
    cache's repository and imports it. The Ray head runs on a system node, the workers on GPU nodes: both pull."""
    role = group(changed)["NodeRole"]["Fn::GetAtt"][0]
    actions = set()
    for policy in resources_of(changed, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                found = statement["Action"]
                actions |= set([found] if isinstance(found, str) else found)
    assert {"ecr:BatchImportUpstreamImage", "ecr:CreateRepository"} <= actions


def test_the_rayjob_waits_for_the_image_cache_rule(template):
    """The pods pull ecr-public images through the cache: CloudFormation must create its rule before the RayJob, or
    the first job's pods ask ECR for a prefix that has no rule yet (ImagePullBackOff)."""
    [ray_job] = [r for r in resources_of(template, "Custom::AWSCDK-EKS-KubernetesResource").values()
                 if '"kind":"RayJob"' in str(r["Properties"]["Manifest"])]
    [rule] = resources_of(template, "AWS::ECR::PullThroughCacheRule")
    assert rule in ray_job["DependsOn"]
