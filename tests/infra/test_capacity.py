"""How the GPU nodes are bought (gpu_capacity_type) and where (gpu_availability_zone auto): the refusals at synth,
the cached lookups synth reads (stacks/lookups.py), the Capacity Block's launch template, the autoscaler's template
node, and the price basis the review shows. The spot template is test_stack_settings_reach_the_template's (every
setting moved); the Capacity Block one is tests.conftest.CAPACITY_BLOCK's, shared with test_checks."""

from __future__ import annotations

import pytest

from cdk_constructs import cluster_autoscaler as ca
from stacks.context import settings_from_context
from stacks.lookups import price_basis
from stacks.settings import SettingsError
from tests.conftest import CAPACITY_BLOCK, UNDER_MUTATION, base_context, only, resources_of, template_for

BLOCK_ID = "cr-0123456789abcdef0"
G6_OFFERED = {"instance-type-offerings:us-east-2:g6.12xlarge": {
    "usage_classes": ["on-demand", "spot"], "zones": ["us-east-2a", "us-east-2b", "us-east-2c"], "as_of": "2026-12-01"}}


def settings(**overrides):
    return settings_from_context(base_context() | overrides)


REFUSED = [
    ({"gpu_capacity_type": "reserved"}, r"^gpu_capacity_type: 'reserved' must be one of on-demand, spot, capacity-block$"),
    ({"gpu_capacity_type": "capacity-block"}, r"^gpu_capacity_type: capacity-block needs capacity_reservation_id, the "
                                              r"Capacity Block's cr-\.\.\. id"),
    ({"gpu_capacity_type": "spot", "capacity_reservation_id": BLOCK_ID},
     r"^gpu_capacity_type: spot cannot launch into capacity_reservation_id cr-0123456789abcdef0 \(a reservation holds "
     r"on-demand capacity\); unset it, or use on-demand$"),
    ({"gpu_capacity_type": "capacity-block", "capacity_reservation_id": BLOCK_ID, **G6_OFFERED},
     r"^gpu_capacity_type: g6\.12xlarge cannot be bought as capacity-block in us-east-2 \(EC2 offers it as on-demand, "
     r"spot; instance-type-offerings:us-east-2:g6\.12xlarge in cdk\.context\.json, 2026-12-01\); use one of those"),
    ({"gpu_capacity_type": "spot", "instance-type-offerings:us-east-2:g6.12xlarge": {"usage_classes": ["on-demand"]}},
     r"^gpu_capacity_type: g6\.12xlarge cannot be bought as spot in us-east-2 \(EC2 offers it as on-demand;"),
    ({"availability_zones": "us-east-2a,us-east-2d", "gpu_availability_zone": "us-east-2d", **G6_OFFERED},
     r"^gpu_availability_zone: g6\.12xlarge is not offered in us-east-2d \(EC2 offers it in us-east-2a, us-east-2b, "
     r"us-east-2c;"),
    ({"gpu_availability_zone": "auto"},
     r"^gpu_availability_zone: auto takes the first zone preflight found with capacity, and cdk\.context\.json has no "
     r"'gpu-zones:us-east-2:g6\.12xlarge:on-demand': run make preflight CDK_ARGS=\"-c gpu_capacity_type=on-demand "
     r"-c gpu_instance_type=g6\.12xlarge -c gpu_availability_zone=auto\" \(PROBE=1 also probes"),
    ({"gpu_availability_zone": "auto",
      "gpu-zones:us-east-2:g6.12xlarge:on-demand": {"zones": ["us-east-2c"], "basis": "probe", "as_of": "2026-12-01"}},
     r"^gpu_availability_zone: auto: the zones with capacity \(us-east-2c, probe 2026-12-01\) are not in "
     r"availability_zones \['us-east-2a', 'us-east-2b'\]; add one of them there$"),
    ({"gpu_spot_interruptions": 21}, r"^gpu_spot_interruptions: 21 must be between 0 and 20$"),
    ({"gpu_capacity_type": "capacity-block", "capacity_reservation_id": BLOCK_ID, "gpu_scale_to_zero": False},
     r"^gpu_scale_to_zero: a capacity-block group needs it true: EKS updates such a group only at desired size 0"),
]


@pytest.mark.parametrize("overrides,message", REFUSED, ids=[
    "unknown-type", "block-without-id", "spot-with-reservation", "block-not-sold", "spot-not-sold", "zone-not-offered",
    "auto-not-cached", "auto-outside-the-vpc", "interruptions", "block-with-fixed-nodes"])
def test_what_cannot_be_bought_is_refused_in_one_line(overrides, message):
    with pytest.raises(SettingsError, match=message) as error:
        settings(**overrides)
    assert "\n" not in str(error.value)


def test_a_type_the_cache_sells_that_way_passes():
    assert settings(gpu_capacity_type="spot", **G6_OFFERED).gpu_capacity_type == "spot"


def test_auto_takes_the_first_cached_zone_that_the_vpc_has():
    cached = {"gpu-zones:us-east-2:g6.12xlarge:on-demand": {"zones": ["us-east-2c", "us-east-2b", "us-east-2a"]}}
    assert settings(gpu_availability_zone="auto", **cached).gpu_availability_zone == "us-east-2b"


def test_preflight_reads_auto_before_it_is_looked_up():
    s = settings_from_context(base_context() | {"gpu_availability_zone": "auto"}, resolve_lookups=False)
    assert s.gpu_availability_zone == "auto"


def test_auto_is_no_zone_name_to_check_against_a_cached_offering():
    # Preflight reads the settings with auto unresolved, and the offering of an earlier preflight is cached: auto
    # stands for a zone still to be looked up, not one named "auto" that EC2 does not offer.
    s = settings_from_context(base_context() | {"gpu_availability_zone": "auto", **G6_OFFERED}, resolve_lookups=False)
    assert s.gpu_availability_zone == "auto"


# ------------------------------------------------------------------ retries sized for interruptions


def test_spot_adds_its_interruptions_to_both_retries_and_other_capacity_adds_none():
    from stacks.settings import trainer_options

    spot, on_demand = settings(gpu_capacity_type="spot"), settings()
    # A Capacity Block's instances are not reclaimed by a spot market: its run keeps the on-demand retries.
    block = settings(gpu_capacity_type="capacity-block", gpu_instance_type="p5.48xlarge", capacity_reservation_id=BLOCK_ID)
    assert (spot.backoff_limit, trainer_options(spot)["max_failures"]) == (1 + 3, 3 + 3)
    assert (on_demand.backoff_limit, trainer_options(on_demand)["max_failures"]) == (1, 3)
    assert (block.backoff_limit, trainer_options(block)["max_failures"]) == (1, 3)


def test_spot_without_extra_retries_is_allowed():
    # gpu_spot_interruptions: 0 to 20 (stacks/settings.py); 0 leaves spot with the on-demand retries.
    from stacks.settings import trainer_options

    spot = settings(gpu_capacity_type="spot", gpu_spot_interruptions=0)
    assert (spot.backoff_limit, trainer_options(spot)["max_failures"]) == (1, 3)


# ------------------------------------------------------------------ the price basis


@pytest.mark.parametrize("overrides,usd,moves,basis", [
    ({}, 4.6016, False, "on-demand list price (2025-06"),
    ({"gpu_capacity_type": "spot", "spot-price:us-east-2:g6.12xlarge": {"zones": {"us-east-2a": 1.4, "us-east-2b": 1.2},
                                                                         "as_of": "2026-12-01T09:00:00Z"}},
     1.4, True, "spot price in us-east-2a as of 2026-12-01T09:00:00Z (30% of on-demand"),
    # Without a cached price: the on-demand price, which EC2 takes as a spot request's maximum by default.
    ({"gpu_capacity_type": "spot"}, 4.6016, True, "spot price not cached (spot-price:us-east-2:g6.12xlarge;"),
    ({"gpu_capacity_type": "capacity-block", "gpu_instance_type": "p5.48xlarge", "capacity_reservation_id": BLOCK_ID},
     0.0, False, "Capacity Block cr-0123456789abcdef0: paid upfront when bought"),
])
def test_the_price_a_gpu_node_is_reviewed_at(overrides, usd, moves, basis):
    context = base_context() | overrides
    priced = price_basis(settings_from_context(context), context)
    assert (priced.usd_per_hour, priced.moves) == (usd, moves) and priced.basis.startswith(basis)


# ------------------------------------------------------------------ the Capacity Block's template

needs_synth = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


@pytest.fixture(scope="module")
def block():
    return template_for(**CAPACITY_BLOCK)


def gpu_group(template) -> dict:
    return only(template, "AWS::EKS::Nodegroup", lambda r: r["Properties"]["AmiType"] == "AL2023_x86_64_NVIDIA")


@needs_synth
def test_a_capacity_block_group_is_bought_from_the_block_its_launch_template_names(block):
    """EKS User Guide, "Create a managed node group with Capacity Blocks for ML": capacityType CAPACITY_BLOCK; the
    launch template's InstanceMarketOptions capacity-block, the block as CapacityReservationTarget and the type."""
    group = gpu_group(block)["Properties"]
    data = block.to_json()["Resources"][group["LaunchTemplate"]["Id"]["Ref"]]["Properties"]["LaunchTemplateData"]
    assert group["CapacityType"] == "CAPACITY_BLOCK"
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": BLOCK_ID}}
    assert data["InstanceType"] == "p5.48xlarge" and "InstanceTypes" not in group  # EKS takes the type in one place


@needs_synth
def test_a_capacity_block_gets_no_placement_group(block):
    """EC2 places a block's instances close together (API CapacityBlock: "inside Amazon EC2 UltraClusters"), and a
    reservation launches only into a placement group it was created in: the stack makes none."""
    assert resources_of(block, "AWS::EC2::PlacementGroup") == {}
    data = block.to_json()["Resources"][gpu_group(block)["Properties"]["LaunchTemplate"]["Id"]["Ref"]]
    assert "Placement" not in data["Properties"]["LaunchTemplateData"]


@needs_synth
def test_the_seams_hold_on_the_capacity_block_and_the_spot_template(block):
    from tests.infra.test_stack_settings_reach_the_template import CHANGED_WITH_LOOKUPS
    from tools.seams import capacity, check_template, workloads
    from tools.seams.cfn import resolve_template

    assert check_template(block.to_json()) == []
    # The spot template names its account (every setting moved), which the harness's Pod Identity calls do not
    # model: its capacity rules and the autoscaler's calls are what spot changes.
    spot = resolve_template(template_for(**CHANGED_WITH_LOOKUPS).to_json())
    assert capacity.problems(spot) == [] and workloads.denials(workloads.autoscaler_calls(spot)) == []


@needs_synth
def test_the_review_shows_the_price_basis_and_prices_the_block_at_nothing_per_hour(block):
    from tools.review import review_lines

    lines = review_lines(block.to_json())
    assert [line for line in lines if line.startswith("GPU price basis: ")] == [
        "GPU price basis: CAPACITY_BLOCK, $0.0000/h per node: Capacity Block cr-0123456789abcdef0: paid upfront when "
        "bought, no hourly charge for its instances; they end with the block, and EKS scales the group to 0 40 min "
        "before (make preflight warns when the job would not fit)"]
    assert any(line.startswith("gpu-worker: 0 to 2 (autoscaled) x p5.48xlarge, 8 x H100 GPU") and
               line.endswith("$0.00/h, $0.00/h while a job runs") for line in lines)


@needs_synth
def test_the_review_prices_spot_nodes_at_the_cached_spot_price_and_says_it_moves():
    """2 nodes x $1.7124 (the cached us-west-2c price) = $3.42/h while a job runs."""
    from tests.infra.test_stack_settings_reach_the_template import CHANGED_WITH_LOOKUPS
    from tools.review import review_lines

    lines = review_lines(template_for(**CHANGED_WITH_LOOKUPS).to_json())
    assert any(line.startswith("GPU price basis: SPOT, $1.7124/h per node: spot price in us-west-2c") and
               line.endswith("it moves") for line in lines)
    assert any(line.startswith("gpu-worker: 0 to 4 (autoscaled) x g6.12xlarge") and "$6.85/h while a job runs" in line
               for line in lines)  # 4 nodes x $1.7124
    [run] = [line for line in lines if line.startswith("per run: ")]
    assert run.endswith("at the spot price of the GPU price basis line, which moves")


# ------------------------------------------------------------------ the autoscaler from zero


def test_the_autoscalers_template_node_carries_the_groups_capacity_type():
    """aws_wrapper.go getManagedNodegroupInfo (cluster-autoscaler-1.36.1) labels the node it imagines with
    DescribeNodegroup's capacityType, as EKS labels the real ones: a pod that selects spot nodes fits a SPOT group's
    template node and not an ON_DEMAND one's."""
    pod = {"containers": [], "nodeSelector": {"eks.amazonaws.com/capacityType": "SPOT"}}
    spot = ca.template_node(48, 196608, 4, {"labels": {}, "capacityType": "SPOT"}, "c", "gpu")
    on_demand = ca.template_node(48, 196608, 4, {"labels": {}, "capacityType": "ON_DEMAND"}, "c", "gpu")
    assert ca.unschedulable_reasons(spot, pod) == []
    assert ca.unschedulable_reasons(on_demand, pod) == [
        "nodeSelector eks.amazonaws.com/capacityType=SPOT: the template node has eks.amazonaws.com/capacityType=ON_DEMAND"]


@needs_synth
def test_the_gpu_group_tells_the_autoscaler_its_capacity_type(block):
    """The group's capacity type, as the stack describes it for the synth's template-node check, is the template's."""
    from tests.conftest import synth_stack

    assert gpu_group(block)["Properties"]["CapacityType"] == "CAPACITY_BLOCK"
    stack = synth_stack(gpu_capacity_type="spot")
    assert stack.gpu_nodes.described["capacityType"] == stack.gpu_nodes.nodegroup.node.default_child.capacity_type
