"""cdk_constructs/cluster_autoscaler.py: the chart's values and the AWS provider's reads, as a worked example against
the chart (cluster-autoscaler 9.59.0 values.yaml keys) and the provider's README policy."""

from __future__ import annotations

from cdk_constructs import cluster_autoscaler as ca


def test_the_chart_values_for_a_cluster_region_and_delay():
    assert ca.autoscaler_values("team-eks", "eu-west-1", 12) == {
        "cloudProvider": "aws",
        "awsRegion": "eu-west-1",
        "autoDiscovery": {"clusterName": "team-eks"},
        "image": {"tag": "v1.36.1"},
        "rbac": {"serviceAccount": {"create": True, "name": "cluster-autoscaler"}},
        "nodeSelector": {"role": "system"},
        "extraArgs": {
            "scale-down-unneeded-time": "12m",
            "scale-down-delay-after-add": "12m",
            "skip-nodes-with-local-storage": "false",
            "expander": "least-waste",
        },
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containerSecurityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                     "readOnlyRootFilesystem": True},
    }


def test_the_reads_are_the_providers_full_feature_policy():
    # cloudprovider/aws/README.md, "Full Cluster Autoscaler Features Policy" (eks:DescribeNodegroup is granted on the
    # GPU group alone, the writes by tag): DescribeLaunchTemplateVersions reads a group's launch template (a Capacity
    # Block's instance type), GetInstanceTypesFromInstanceRequirements a mixed-instances group's.
    assert sorted(ca.READ_ACTIONS) == sorted([
        "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
        "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
        "ec2:DescribeImages", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
        "ec2:GetInstanceTypesFromInstanceRequirements"])
    assert ca.WRITE_ACTIONS == ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")
