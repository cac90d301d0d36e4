"""tools/review.py's pricing of node groups on small hand-built templates: which groups count as GPU nodes, what
each is priced at, and the idle and per-job figures, as worked examples at the list prices (g6.12xlarge $4.6016/h,
m7i.xlarge $0.2016/h, a NAT gateway $0.045/h)."""

from __future__ import annotations

import pytest

from cdk_constructs.instance_types import PRICE_METADATA
from tools import review

G6, M7I, NAT = 4.6016, 0.2016, 0.045


def nodegroup(instance_type: str | None, low: int, high: int, **properties) -> dict:
    props = {"ScalingConfig": {"MinSize": low, "MaxSize": high}, **properties}
    if instance_type:
        props["InstanceTypes"] = [instance_type]
    return {"Type": "AWS::EKS::Nodegroup", "Properties": props}


def priced(resource: dict, usd_per_hour: float, basis: str, moves: bool) -> dict:
    """The GPU group as the synth marks a spot or Capacity Block price (cdk_constructs/node_groups.py)."""
    return resource | {"Metadata": {PRICE_METADATA: {"usd_per_hour": usd_per_hour, "basis": basis, "moves": moves}}}


# An autoscaled CPU group larger than the GPU group: it must count in no GPU figure.
CLUSTER = {"Resources": {
    "System": nodegroup("m7i.xlarge", 2, 5, Labels={"role": "system"}),
    "Gpu": nodegroup("g6.12xlarge", 1, 3, Labels={"role": "gpu-worker"}),
    "NatA": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
    "NatB": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
}}


def test_the_idle_cost_is_each_groups_minimum_at_its_price_plus_the_nats():
    """2 x 0.2016 + 1 x 4.6016 + 2 x 0.045 = 5.0948 $/h: the minimum of each group, not its maximum; each NAT."""
    [idle] = [line for line in review.review_lines(CLUSTER) if line.startswith("idle cost")]
    assert idle.startswith(f"idle cost (no job running): ${2 * M7I + G6 + 2 * NAT:.2f}/hour")
    assert "$5.09/hour" in idle  # the same, worked by hand


def test_a_groups_line_gives_its_idle_and_its_busy_cost():
    lines = review.review_lines(CLUSTER)
    assert any(line.startswith("gpu-worker: 1 to 3 (autoscaled) x g6.12xlarge, 4 x L4 GPU, 1 EFA each")
               and line.endswith(f": ${G6:.2f}/h, ${3 * G6:.2f}/h while a job runs") for line in lines)


def test_the_gpu_cost_while_a_job_runs_is_the_gpu_groups_nodes_above_their_minimum():
    """(3 - 1) x 4.6016; the CPU group's 3 autoscaled nodes are no GPU cost."""
    assert review.gpu_usd_per_hour(CLUSTER) == pytest.approx(2 * G6)


def test_a_job_starts_the_gpu_groups_maximum_not_a_cpu_groups():
    assert review._gpu_nodes_per_job(CLUSTER) == 3


def test_a_gpu_group_the_synth_priced_is_costed_at_that_price():
    spot = {"Resources": {"Gpu": priced(nodegroup("g6.12xlarge", 0, 2, CapacityType="SPOT"), 1.7124,
                                        "spot price in us-west-2c", moves=True)}}
    assert review.gpu_usd_per_hour(spot) == pytest.approx(2 * 1.7124)
    assert review.price_basis_line(spot) == "GPU price basis: SPOT, $1.7124/h per node: spot price in us-west-2c"
    assert review._moving_price_note(spot) == "; at the spot price of the GPU price basis line, which moves"


def test_a_price_that_does_not_move_adds_no_note_and_on_demand_is_the_default_capacity_type():
    block = {"Resources": {"Gpu": priced(nodegroup("g6.12xlarge", 0, 2), 0.0, "Capacity Block", moves=False)}}
    assert review._moving_price_note(block) == ""
    assert review.price_basis_line(block) == "GPU price basis: ON_DEMAND, $0.0000/h per node: Capacity Block"
    assert review._moving_price_note(CLUSTER) == ""


def test_an_unpriced_group_is_at_the_on_demand_list_price():
    assert review.node_price(CLUSTER["Resources"]["Gpu"], review.INSTANCE_TYPES["g6.12xlarge"])[0] == G6


def test_a_group_without_instance_types_takes_its_launch_templates_type():
    """A Capacity Block's group names its type in the launch template only (EKS takes it in one place)."""
    resources = {"Lt": {"Type": "AWS::EC2::LaunchTemplate",
                        "Properties": {"LaunchTemplateData": {"InstanceType": "p5.48xlarge"}}},
                 "Gpu": nodegroup(None, 0, 2, LaunchTemplate={"Id": {"Ref": "Lt"}})}
    assert review.nodegroup_instance_type(resources, resources["Gpu"]["Properties"]) == "p5.48xlarge"
    assert review._gpu_nodes_per_job({"Resources": resources}) == 2
    listed = nodegroup("g6.12xlarge", 0, 2, LaunchTemplate={"Id": {"Ref": "Lt"}})
    assert review.nodegroup_instance_type(resources, listed["Properties"]) == "g6.12xlarge"


def test_only_interface_endpoints_bill_by_the_endpoint_az():
    """A gateway endpoint (S3) is free; an interface endpoint bills per subnet (AZ) it is in."""
    template = {"Resources": {
        "Ecr": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface", "SubnetIds": ["a", "b"]}},
        "S3": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Gateway", "SubnetIds": ["a", "b"]}}}}
    assert review.interface_endpoint_azs(template) == 2


def test_a_job_start_pays_the_nat_for_each_nodes_image_pull():
    """3 nodes x 12 GiB (12.885 GB) x $0.045/GB processed = $1.74; through the pull-through cache, a tag's first pull
    at most, one node's: $0.58."""
    assert review._image_pull_text({"Resources": {}}, 3).startswith("~$1.74 pulling the image through the NAT (3 x 12 GiB")
    cached = {"Resources": {"Rule": {"Type": "AWS::ECR::PullThroughCacheRule", "Properties": {}}}}
    assert review._image_pull_text(cached, 3).endswith("up to ~$0.58 once)")


def test_the_first_step_comes_after_the_boot_and_the_image_pull():
    """180 s of boot, then 12 GiB at 150 MiB/s = 81.9 s: 261.9 s."""
    assert review.first_step_s() == pytest.approx(180 + 12 * 1024 / 150)
