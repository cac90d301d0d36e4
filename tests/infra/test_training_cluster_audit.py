"""The order the stack creates things in: each CloudFormation DependsOn the deploy relies on.

A dependency dropped or pointed at the neighbouring resource still synthesizes and often still deploys, until
CloudFormation happens to create the two in the other order: nodes that join before the VPC CNI has its credentials,
device plugins or an operator with no node to run on (Helm's wait times out), a job whose pods start before
their role, their namespace or the log shipper. One row per edge, on the default template."""

from __future__ import annotations

import json

import pytest

from cdk_constructs import cluster_autoscaler, device_plugins, kuberay, node_groups, observability, vpc_cni
from tests.conftest import UNDER_MUTATION, only, resources_of
from tests.infra.test_cluster_software import manifest_of
from tests.infra.test_stack_settings_reach_the_template import changed  # noqa: F401 - its fixture

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def _chart(name):
    return lambda r: r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == name


def _addon(name):
    return lambda r: r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == name


def _nodegroup(labels):
    return lambda r: r["Type"] == "AWS::EKS::Nodegroup" and labels.items() <= r["Properties"].get("Labels", {}).items()


def _association(service_account):
    return lambda r: (r["Type"] == "AWS::EKS::PodIdentityAssociation"
                      and r["Properties"]["ServiceAccount"] == service_account)


def _log_group(kind):
    return lambda r: r["Type"] == "AWS::Logs::LogGroup" and r["Properties"].get("LogGroupName") == \
        f"/aws/containerinsights/EksFsdpEfa/{kind}"


def _manifest(kind):
    return lambda r: (r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
                      and f'"kind":"{kind}"' in json.dumps(r["Properties"]["Manifest"]).replace('\\"', '"'))


RESOURCES = {
    "system nodes": _nodegroup(node_groups.SYSTEM_NODE_LABELS),
    "GPU nodes": _nodegroup(node_groups.GPU_NODE_LABELS),
    "VPC CNI": _addon(vpc_cni.ADDON_NAME),
    "Pod Identity agent": _addon("eks-pod-identity-agent"),
    "NVIDIA device plugin": _chart(device_plugins.NVIDIA_CHART),
    "EFA device plugin": _chart(device_plugins.EFA_CHART),
    "KubeRay": _chart(kuberay.KUBERAY_CHART),
    "Cluster Autoscaler": _chart(cluster_autoscaler.CHART),
    "autoscaler's association": _association(cluster_autoscaler.SERVICE_ACCOUNT),
    "CloudWatch add-on": _addon(observability.ADDON_NAME),
    "RayJob": _manifest("RayJob"),
    "training namespace": _manifest("Namespace"),
    "Ray pods' association": _association("ray"),
    **{f"{kind} log group": _log_group(kind) for kind in ("application", "dataplane", "host", "performance")},
}

EDGES = [
    # Nodes join with aws-node already holding its Pod Identity credentials (the node role has no CNI policy).
    ("system nodes", "VPC CNI"), ("GPU nodes", "VPC CNI"), ("VPC CNI", "Pod Identity agent"),
    # Helm waits for DaemonSets and Deployments that need a node to run on.
    ("NVIDIA device plugin", "GPU nodes"), ("EFA device plugin", "GPU nodes"), ("KubeRay", "system nodes"),
    ("Cluster Autoscaler", "system nodes"), ("CloudWatch add-on", "system nodes"),
    # Credentials come from the association through the agent when the pod starts.
    ("Cluster Autoscaler", "autoscaler's association"), ("Cluster Autoscaler", "Pod Identity agent"),
    ("CloudWatch add-on", "Pod Identity agent"),
    # The groups exist with their retention and key before the agent and Fluent Bit create them bare.
    *(("CloudWatch add-on", f"{kind} log group") for kind in ("application", "dataplane", "host", "performance")),
    # The job: CRDs, GPU and EFA resources, its namespace and role, and Fluent Bit reading from its first line.
    ("RayJob", "KubeRay"), ("RayJob", "NVIDIA device plugin"), ("RayJob", "EFA device plugin"),
    ("RayJob", "training namespace"), ("RayJob", "Ray pods' association"), ("RayJob", "Pod Identity agent"),
    ("RayJob", "CloudWatch add-on"),
]


def _logical_id(resources: dict, name: str) -> str:
    [found] = [k for k, r in resources.items() if RESOURCES[name](r)]
    return found


@pytest.mark.parametrize("dependent,dependency", EDGES, ids=[f"{a} after {b}" for a, b in EDGES])
def test_each_resource_is_created_after_what_it_needs(template, dependent, dependency):
    resources = template.to_json()["Resources"]
    assert _logical_id(resources, dependency) in resources[_logical_id(resources, dependent)].get("DependsOn", [])


@pytest.mark.parametrize("auto_delete", [False, True])
def test_the_checkpoint_bucket_is_kept_on_destroy_unless_auto_delete_is_set(template, changed, auto_delete):  # noqa: F811
    # training.checkpoint_bucket_auto_delete is off by default and on in CHANGED: checkpoints outlive the stack
    # (CloudFormation's DeletionPolicy Retain) unless the user asked otherwise.
    tpl = changed if auto_delete else template
    assert only(tpl, "AWS::S3::Bucket")["DeletionPolicy"] == ("Delete" if auto_delete else "Retain")
    assert len(resources_of(tpl, "Custom::S3AutoDeleteObjects")) == int(auto_delete)


@pytest.mark.parametrize("which,days", [("default", 30), ("changed", 14)])
def test_every_log_group_has_the_stacks_retention_and_logs_key(template, changed, which, days):  # noqa: F811
    # Flow logs, the control plane's, the CloudWatch add-on's and every Lambda's: log_retention_days (30, and 14
    # in CHANGED) and the one logs key (flow logs name internal addresses and ports).
    tpl = template if which == "default" else changed
    [key] = [k for k in resources_of(tpl, "AWS::KMS::Key") if k.startswith("LogsKey")]
    groups = resources_of(tpl, "AWS::Logs::LogGroup")
    # flow logs, the control plane, 4 Container Insights groups, and one for each aws-cdk-lib Lambda
    assert len(groups) == 6 + len(resources_of(tpl, "AWS::Lambda::Function"))
    for group in groups.values():
        assert group["Properties"]["RetentionInDays"] == days
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}


def test_the_outputs_name_the_job_its_namespace_cluster_and_bucket(template):
    # What `make watch` and `make destroy` read (tools/watch.py, tools/teardown.py), each from its own resource.
    outputs = {k: v["Value"] for k, v in template.to_json()["Outputs"].items()}
    name = manifest_of(template, "RayJob")["metadata"]["name"]
    assert (outputs["Namespace"], outputs["RayJobName"]) == ("training", name)
    [cluster] = resources_of(template, "AWS::EKS::Cluster")
    [bucket] = resources_of(template, "AWS::S3::Bucket")
    assert outputs["ClusterName"] == {"Ref": cluster}
    assert outputs["CheckpointBucket"] == {"Ref": bucket}
    assert outputs["JobStatus"] == f"kubectl -n training get rayjob {name} -o wide"
    assert outputs["JobLogs"] == f"kubectl -n training logs -f job/{name}"


@pytest.mark.parametrize("which,tag", [("default", ("project", "eks-fsdp-efa")), ("changed", ("team", "ml"))])
def test_the_tags_setting_reaches_every_tagged_resource(template, changed, which, tag):  # noqa: F811
    # Tags.of(stack): the network, the bucket and the roles as much as the cluster (lists of Key/Value, or a map on
    # a node group).
    tpl = template if which == "default" else changed
    tagged = {k: r["Properties"]["Tags"] for k, r in tpl.to_json()["Resources"].items() if "Tags" in r.get("Properties", {})}
    assert len(tagged) > 20
    key, value = tag
    missing = [k for k, tags in tagged.items()
               if (tags.get(key) if isinstance(tags, dict) else {t["Key"]: t["Value"] for t in tags}.get(key)) != value]
    assert not missing


def test_the_image_caches_endpoints_are_in_the_gpu_zones_subnet_only(changed):  # noqa: F811
    # Interface endpoints bill per AZ: one subnet each, the GPU nodes' (auto took us-west-2c in CHANGED, not the VPC's
    # first zone).
    [gpu] = [r for r in resources_of(changed, "AWS::EKS::Nodegroup").values()
             if r["Properties"].get("Labels", {}).get("role") == "gpu-worker"]
    endpoints = [r for r in resources_of(changed, "AWS::EC2::VPCEndpoint").values()
                 if r["Properties"].get("VpcEndpointType") == "Interface"]
    assert len(endpoints) == 2
    for endpoint in endpoints:
        assert endpoint["Properties"]["SubnetIds"] == gpu["Properties"]["Subnets"]
    [subnet] = gpu["Properties"]["Subnets"]
    assert changed.to_json()["Resources"][subnet["Ref"]]["Properties"]["AvailabilityZone"] == "us-west-2c"
