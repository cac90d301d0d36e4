"""Each stack setting, moved off its default, lands where AWS (or the Kubernetes controller) reads it.

One synthesis carries every non-default value at once; each test reads one property path of it. The
expected values are the literals below, not values recomputed by the code under test. The property
paths are CloudFormation's (AWS::EKS::Cluster Name, AWS::EKS::Nodegroup ScalingConfig, ...) and KubeRay's
RayJob fields (rayjob_types.go v1.7.0: activeDeadlineSeconds, preRunningDeadlineSeconds, backoffLimit,
submitterConfig.backoffLimit, ttlSecondsAfterFinished).
"""

from __future__ import annotations

import json
import shlex

import pytest

from tests.conftest import UNDER_MUTATION, only, resources_of, template_for
from tests.infra.test_cluster_software import manifest_of

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")

# Every value differs from its default (test_the_values_are_not_the_defaults) and all are valid together.
CHANGED = {
    "stack_name": "OtherName",
    "account": "123456789012",
    "region": "us-west-2",
    "availability_zones": "us-west-2a,us-west-2b,us-west-2c",
    "gpu_availability_zone": "auto",
    "gpu_capacity_type": "spot",
    "gpu_spot_interruptions": "4",
    "vpc_cidr": "10.8.0.0/18",
    "nat_gateways": "2",
    "endpoint_public_cidrs": "203.0.113.0/24",
    "admin_principal_arn": "arn:aws:iam::123456789012:role/Admin",
    "system_instance_type": "m7i.2xlarge",
    "system_node_count": "2",
    "system_node_disk_gib": "120",
    "gpu_node_count": "4",
    "gpu_node_disk_gib": "300",
    "gpu_scale_down_delay_minutes": "7",
    "gpu_node_taint": "false",
    "log_retention_days": "14",
    "tags": '{"team": "ml"}',
    "training.image": "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.2",
    "training.ray_version": "2.59.0",
    "training.hf_token_secret": "hf-token",
    "training.tracking": "wandb",
    "training.wandb_api_key_secret": "team/wandb-key",
    "training.active_deadline_seconds": "7200",
    "training.pre_running_deadline_seconds": "900",
    "training.backoff_limit": "2",
    "training.submitter_backoff_limit": "3",
    "training.ttl_seconds_after_finished": "600",
    "training.rerun": "2",
    "training.checkpoint_bucket_auto_delete": "true",
    "training.termination_grace_period_seconds": "150",
}
# What `make preflight` caches in cdk.context.json and CDK hands the app as context (stacks/lookups.py): auto's
# zones (us-west-2d first, which the VPC lacks), the offering, and the spot prices.
LOOKUPS = {
    "gpu-zones:us-west-2:g6.12xlarge:spot": {"zones": ["us-west-2d", "us-west-2c", "us-west-2a"],
                                              "basis": "spot placement score", "as_of": "2026-12-01T09:00:00Z"},
    "instance-type-offerings:us-west-2:g6.12xlarge": {"usage_classes": ["on-demand", "spot"],
                                                      "zones": ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"]},
    "spot-price:us-west-2:g6.12xlarge": {"zones": {"us-west-2a": 2.0311, "us-west-2c": 1.7124},
                                         "as_of": "2026-12-01T09:00:00Z"},
}
CHANGED_WITH_LOOKUPS = CHANGED | LOOKUPS


@pytest.fixture(scope="module")
def changed():
    return template_for(**CHANGED_WITH_LOOKUPS)


@pytest.fixture(scope="module")
def ray_job(changed):
    return manifest_of(changed, "RayJob")


def nodegroup(template, ami: str) -> dict:
    return only(template, "AWS::EKS::Nodegroup", lambda r: r["Properties"]["AmiType"] == ami)["Properties"]


def gpu_nodegroup(template) -> dict:
    return nodegroup(template, "AL2023_x86_64_NVIDIA")


def system_nodegroup(template) -> dict:
    return nodegroup(template, "AL2023_x86_64_STANDARD")


def launch_template_of(template, group: dict) -> dict:
    return template.to_json()["Resources"][group["LaunchTemplate"]["Id"]["Ref"]]["Properties"]["LaunchTemplateData"]


def cluster(template) -> dict:
    return only(template, "AWS::EKS::Cluster")["Properties"]


def worker_container(job: dict) -> dict:
    [group] = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    return group["template"]["spec"]["containers"][0]


def test_the_values_are_not_the_defaults():
    from stacks.context import settings_from_context
    from tests.conftest import base_context

    default, moved = settings_from_context(base_context()), settings_from_context(base_context() | CHANGED_WITH_LOOKUPS)
    for key in CHANGED:
        field = key.removeprefix("training.")
        holder = (lambda s: s.training) if key.startswith("training.") else (lambda s: s)
        assert getattr(holder(default), field) != getattr(holder(moved), field), key


def test_stack_name_is_the_eks_clusters_name(changed):
    assert cluster(changed)["Name"] == "OtherName"


def test_account_is_the_registry_the_pods_pull_from(ray_job):
    # The pull-through cache's registry is <account>.dkr.ecr.<region>.<suffix>: a deploy-time token by default.
    assert worker_container(ray_job)["image"].startswith("123456789012.dkr.ecr.us-west-2.")


def test_region_reaches_the_pods_aws_region(ray_job):
    env = {e["name"]: e.get("value") for e in worker_container(ray_job)["env"]}
    assert env["AWS_REGION"] == "us-west-2"


def test_availability_zones_are_the_subnets_zones(changed):
    zones = sorted(r["Properties"]["AvailabilityZone"] for r in resources_of(changed, "AWS::EC2::Subnet").values())
    assert zones == ["us-west-2a", "us-west-2a", "us-west-2b", "us-west-2b", "us-west-2c", "us-west-2c"]


def test_gpu_availability_zone_auto_is_the_first_cached_zone_with_capacity_that_the_vpc_has(changed):
    [subnet] = gpu_nodegroup(changed)["Subnets"]
    assert changed.to_json()["Resources"][subnet["Ref"]]["Properties"]["AvailabilityZone"] == "us-west-2c"


def test_gpu_capacity_type_is_the_node_groups_capacity_type(changed):
    assert gpu_nodegroup(changed)["CapacityType"] == "SPOT"


def test_the_spot_price_of_the_gpu_zone_is_what_the_template_prices_a_node_at(changed):
    [group] = [r for r in resources_of(changed, "AWS::EKS::Nodegroup").values()
               if r["Properties"]["AmiType"] == "AL2023_x86_64_NVIDIA"]
    price = group["Metadata"]["eks-fsdp-efa:price"]
    assert (price["usd_per_hour"], price["moves"]) == (1.7124, True)  # us-west-2c's, not us-west-2a's 2.0311
    assert price["basis"].startswith("spot price in us-west-2c as of 2026-12-01T09:00:00Z (37% of on-demand")


def test_gpu_spot_interruptions_add_to_the_job_retries_and_ray_trains(ray_job):
    """training.backoff_limit 2 + 4 interruptions = 6 fresh-cluster retries; training.max_failures 3 + 4 = 7."""
    assert ray_job["spec"]["backoffLimit"] == 6
    assert "--max-failures=7" in shlex.split(ray_job["spec"]["entrypoint"])


def test_pre_running_deadline_bounds_the_wait_for_a_lost_nodes_replacement(ray_job):
    assert "--node-wait-s=900" in shlex.split(ray_job["spec"]["entrypoint"])


def test_vpc_cidr_is_the_vpcs_block(changed):
    assert only(changed, "AWS::EC2::VPC")["Properties"]["CidrBlock"] == "10.8.0.0/18"


def test_nat_gateways_count(changed):
    assert len(resources_of(changed, "AWS::EC2::NatGateway")) == 2


def test_endpoint_public_cidrs_are_the_endpoints_allowed_sources(changed):
    assert cluster(changed)["ResourcesVpcConfig"]["PublicAccessCidrs"] == ["203.0.113.0/24"]


def test_admin_principal_arn_gets_the_admin_access_entry(changed):
    entries = [r["Properties"] for r in resources_of(changed, "AWS::EKS::AccessEntry").values()
               if r["Properties"]["PrincipalArn"] == "arn:aws:iam::123456789012:role/Admin"]
    assert [e["AccessPolicies"][0]["PolicyArn"]["Fn::Join"][1][-1] for e in entries] == [
        ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"]


def test_system_instance_type_and_count(changed):
    group = system_nodegroup(changed)
    assert group["InstanceTypes"] == ["m7i.2xlarge"]
    assert group["ScalingConfig"] == {"DesiredSize": 2, "MaxSize": 2, "MinSize": 2}


def test_system_node_disk_gib_is_the_root_volume(changed):
    [mapping] = launch_template_of(changed, system_nodegroup(changed))["BlockDeviceMappings"]
    assert mapping["Ebs"]["VolumeSize"] == 120


def test_gpu_node_count_is_the_gpu_groups_maximum_and_the_ray_workers(changed, ray_job):
    assert gpu_nodegroup(changed)["ScalingConfig"]["MaxSize"] == 4
    [group] = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == 4


def test_gpu_node_disk_gib_is_the_root_volume(changed):
    [mapping] = launch_template_of(changed, gpu_nodegroup(changed))["BlockDeviceMappings"]
    assert mapping["Ebs"]["VolumeSize"] == 300


def test_gpu_node_taint_off_leaves_the_gpu_nodes_untainted(changed):
    assert "Taints" not in gpu_nodegroup(changed)


def test_gpu_scale_down_delay_minutes_reaches_the_autoscalers_args(changed):
    [chart] = [r["Properties"] for r in resources_of(changed, "Custom::AWSCDK-EKS-HelmChart").values()
               if r["Properties"]["Chart"] == "cluster-autoscaler"]
    values = json.loads(chart["Values"]) if isinstance(chart["Values"], str) else chart["Values"]
    assert values["extraArgs"]["scale-down-unneeded-time"] == "7m"


def test_log_retention_days_on_every_log_group(changed):
    retention = {r["Properties"].get("RetentionInDays") for r in resources_of(changed, "AWS::Logs::LogGroup").values()}
    assert retention == {14}


def test_tags_reach_the_resources(changed):
    assert {"Key": "team", "Value": "ml"} in only(changed, "AWS::EC2::VPC")["Properties"]["Tags"]
    assert gpu_nodegroup(changed)["Tags"]["team"] == "ml"


def test_image_is_what_the_workers_pull_through_the_cache(ray_job):
    assert worker_container(ray_job)["image"].endswith("/deep-learning-containers/ray:train-ml-cuda-v1.2")


def test_ray_version_is_the_clusters_ray_version(ray_job):
    assert ray_job["spec"]["rayClusterSpec"]["rayVersion"] == "2.59.0"


def test_hf_token_secret_becomes_the_pods_hf_token(ray_job):
    [token] = [e for e in worker_container(ray_job)["env"] if e["name"] == "HF_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}


def test_wandb_api_key_secret_is_the_one_secret_the_workers_read_through_the_pods_role(ray_job, changed):
    """The workers get the secret's name; the pods' role may read that secret (any of the ARNs Secrets Manager gives
    its name) and no other, as IAM evaluates the call rank 0 makes."""
    from tools.seams import kube
    from tools.seams import workloads as w
    from tools.seams.cfn import ACCOUNT, Resolver

    assert {"name": "WANDB_API_KEY_SECRET", "value": "team/wandb-key"} in worker_container(ray_job)["env"]
    resolved = Resolver(changed.to_json(), "us-west-2")
    [call] = w.tracking_calls(resolved, [obj for _, obj, _ in kube.manifests(resolved)])
    assert call.request.resource == f"arn:aws:secretsmanager:us-west-2:{ACCOUNT}:secret:team/wandb-key-AbCdEf"
    assert w.denials([call]) == []
    other = w.Call(call.workload, call.source, w.Request(call.request.principal, call.request.action,
                                                         call.request.resource.replace("wandb-key", "other-key")), call.policies)
    assert len(w.denials([other])) == 1


# CHANGED's job limits and the RayJob spec fields KubeRay reads them from.
JOB_LIMIT_FIELDS = [
    (("activeDeadlineSeconds",), 7200),  # training.active_deadline_seconds
    (("preRunningDeadlineSeconds",), 900),  # training.pre_running_deadline_seconds
    (("backoffLimit",), 6),  # training.backoff_limit 2 and gpu_spot_interruptions 4
    (("submitterConfig", "backoffLimit"), 3),  # training.submitter_backoff_limit
    (("ttlSecondsAfterFinished",), 600),  # training.ttl_seconds_after_finished
]


def spec_field(ray_job: dict, path: tuple):
    """The value at `path` under the RayJob's spec."""
    found = ray_job["spec"]
    for key in path:
        found = found[key]
    return found


@pytest.mark.parametrize("path,value", JOB_LIMIT_FIELDS)
def test_job_limits_reach_the_rayjob_fields_kuberay_reads(ray_job, path, value):
    assert spec_field(ray_job, path) == value


def test_rerun_is_a_new_run_name(ray_job):
    [run_name] = [a for a in shlex.split(ray_job["spec"]["entrypoint"]) if a.startswith("--run-name=")]
    assert run_name.endswith("-r2")


def test_checkpoint_bucket_auto_delete_deletes_the_bucket_and_its_objects(changed):
    bucket = only(changed, "AWS::S3::Bucket")
    assert bucket["DeletionPolicy"] == "Delete"
    assert len(resources_of(changed, "Custom::S3AutoDeleteObjects")) == 1


def test_termination_grace_period_is_the_worker_pods_and_bounds_their_prestop_wait(ray_job):
    """The GPU worker pods' terminationGracePeriodSeconds, which the kubelet counts the preStop hook against; the
    hook gives up 5 s before it (training.preemption.HOOK_MARGIN_S)."""
    pod = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 150
    assert pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == [
        "python", "-m", "training.preemption", "--wait", "145"]
