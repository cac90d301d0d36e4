"""cdk_constructs/node_groups.py case by case: the node role's two managed policies, the GPU nodes' user data as
EC2 and systemd read it, and the labels and autoscaler tags of each GPU type."""

from __future__ import annotations

import base64
import email

import pytest

from cdk_constructs.instance_types import INSTANCE_TYPES
from cdk_constructs.node_groups import gpu_node_labels, gpu_node_tags, launch_template_data, memlock_user_data


def test_a_node_may_join_the_cluster_and_pull_images_and_nothing_else():
    # EKS User Guide, "Amazon EKS node IAM role": AmazonEKSWorkerNodePolicy to join; ECR's pull-only policy
    # rather than read-only (which also lists and describes every repository). No CNI policy: the VPC CNI has its own.
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from cdk_constructs.node_groups import node_role

    stack = Stack(App(), "NodeRoleOnly")
    node_role(stack)
    [role] = Template.from_stack(stack).find_resources("AWS::IAM::Role").values()
    policies = {arn["Fn::Join"][1][-1].removeprefix(":iam::aws:policy/") for arn in role["Properties"]["ManagedPolicyArns"]}
    assert policies == {"AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly"}
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


def test_the_user_data_is_one_mime_shell_part_that_gives_containerd_an_unlimited_memlock():
    # EKS requires MIME multipart user data in a managed node group's launch template.
    message = email.message_from_string(memlock_user_data())
    assert message.is_multipart() and message.get_content_type() == "multipart/mixed"
    [part] = message.get_payload()
    assert part.get_content_type() == "text/x-shellscript"
    script = part.get_payload().splitlines()
    assert script[:2] == ["#!/bin/bash", "set -euo pipefail"]
    # systemd reads drop-ins from <unit>.d/*.conf; the new limit needs a daemon-reload, and try-restart restarts a
    # running containerd only: nodeadm starts it later, once its own configuration is written.
    assert "printf '[Service]\\nLimitMEMLOCK=infinity\\n' > /etc/systemd/system/containerd.service.d/90-memlock.conf" in script
    assert script.index("systemctl daemon-reload") < script.index("systemctl try-restart containerd")


def test_the_launch_template_carries_the_user_data_base64_encoded():
    data = launch_template_data(200, user_data=memlock_user_data())
    assert base64.b64decode(data["UserData"]).decode() == memlock_user_data()


@pytest.mark.parametrize("instance_type,accelerator,efa", [("g6.12xlarge", "nvidia-l4", "1"), ("p5.48xlarge", "nvidia-h100", "32"),
                                                           ("p4d.24xlarge", "nvidia-a100", "4")])
def test_a_gpu_node_is_labelled_with_its_accelerator_and_tagged_with_its_efa_interfaces(instance_type, accelerator, efa):
    spec = INSTANCE_TYPES[instance_type]
    assert gpu_node_labels(spec) == {"role": "gpu-worker", "nvidia.com/gpu.present": "true",
                                     "k8s.amazonaws.com/accelerator": accelerator}
    assert gpu_node_tags(spec) == {"k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa": efa}
