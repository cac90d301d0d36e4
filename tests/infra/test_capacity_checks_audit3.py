"""tools/capacity_checks.py's refusals no other test reached: a type offered nowhere in the region, a Capacity Block
id that does not exist, no zone with capacity, kept zones outside availability_zones, and the probe's cleanup run
off the main thread (where SIGINT cannot be held off)."""

from __future__ import annotations

import threading

from tests.infra.test_capacity_checks_cases import Block, Ec2
from tests.infra.test_capacity_preflight import P5_BLOCK, p5_block_offered, settings
from tools import capacity_checks as capacity
from tools.verdicts import FAIL, PASS, WARN

OFFERED_NOWHERE = {"instance-type-offerings:us-east-2:g6.12xlarge": {"usage_classes": [], "zones": []}}


def test_a_type_offered_in_no_zone_of_the_region_fails_and_says_what_to_change():
    check = capacity.check_zones(Block("none"), settings(), dict(OFFERED_NOWHERE))
    assert check == capacity.Check("zones", FAIL, "g6.12xlarge is not offered in any zone of us-east-2",
                                   "choose another region (-c region=...) or -c gpu_instance_type=...")


class _NoReservation(Block):
    def describe_capacity_reservations(self, **_):
        return {"CapacityReservations": []}


def test_a_capacity_block_id_that_does_not_exist_fails_naming_the_id_and_region():
    s = settings(*P5_BLOCK)
    [check] = capacity.check_capacity_block(_NoReservation("none"), s, 3600)
    assert check == capacity.Check("capacity block", FAIL, "cr-0123456789abcdef0 does not exist in us-east-2",
                                   "check the id and region")


def test_a_probe_that_finds_capacity_in_no_zone_fails():
    # Every zone refuses the reservation: nothing to rank, and a deploy would wait for nodes that never come.
    class Nowhere(Block):
        def create_capacity_reservation(self, AvailabilityZone, **_):
            from botocore.exceptions import ClientError
            raise ClientError({"Error": {"Code": "InsufficientInstanceCapacity", "Message": "no"}}, "Create")

    cache = {"instance-type-offerings:us-east-2:g6.12xlarge": {"usage_classes": ["on-demand"],
                                                               "zones": ["us-east-2a", "us-east-2b"]}}
    check = capacity.check_zones(Nowhere("none"), settings(), cache, probe=True, say=lambda line: None)
    assert check.verdict == FAIL and check.reason.endswith("; no zone with capacity")
    assert check.fix == "try later, another gpu_instance_type or region, or gpu_capacity_type"


def test_kept_zones_none_of_which_availability_zones_has_warn_and_name_them():
    s = settings("gpu_availability_zone=auto")  # availability_zones: us-east-2a, us-east-2b
    held = {"zones": ["us-east-2c"], "basis": "probe", "as_of": "2026-12-01T09:00:00Z"}
    check = capacity._auto_zone(s, "zones", ["us-east-2a"], held, "gpu-zones:us-east-2:g6.12xlarge:on-demand")
    assert check.verdict == WARN
    assert check.reason == ("zones; the kept zones (us-east-2c; gpu-zones:us-east-2:g6.12xlarge:on-demand in "
                            "cdk.context.json, probe, 2026-12-01T09:00:00Z) are not in availability_zones")
    assert check.fix == "add one of them to availability_zones, or make preflight REFRESH=1"


def test_auto_without_a_kept_ranking_passes_with_the_fresh_one():
    s = settings("gpu_availability_zone=auto")
    check = capacity._auto_zone(s, "zones", ["us-east-2b", "us-east-2a"], None, "k")
    assert check == capacity.Check("zones", PASS, "zones; auto takes the first of us-east-2b, us-east-2a in "
                                   "availability_zones")


def test_the_cleanup_cancels_its_reservations_off_the_main_thread_too():
    # signal.signal raises ValueError outside the main thread: the cleanup must still run, not stop there.
    ec2, errors = Ec2("none"), []

    def clean():
        try:
            capacity._clean_up(ec2, ["cr-a", "cr-b"], "token", sleep=lambda s: None)
        except Exception as error:  # noqa: BLE001 - the thread's failure is the test's
            errors.append(error)

    thread = threading.Thread(target=clean)
    thread.start()
    thread.join()
    assert errors == [] and ec2.cancelled == ["cr-a", "cr-b"]


def test_a_capacity_block_that_is_not_found_leaves_no_zone_and_fails():
    s = settings(*P5_BLOCK)
    cache = p5_block_offered()
    check = capacity.check_zones(_NoReservation("none"), s, cache)
    assert check.verdict == FAIL
    assert check.reason == ("p5.48xlarge capacity-block: the zone of Capacity Block cr-0123456789abcdef0: no such "
                            "reservation; no zone with capacity")


def test_a_blocks_size_is_its_total_instances_not_those_still_free():
    # A block whose instances run (a rerun on the same block) has AvailableInstanceCount 0 but still holds them all:
    # EC2's CapacityReservation counts TotalInstanceCount as the block's size.
    from tests.infra.test_capacity_preflight import block_checks

    assert [c.verdict for c in block_checks(3600, TotalInstanceCount=2, AvailableInstanceCount=0)] == [PASS, PASS]
    [short] = block_checks(3600, TotalInstanceCount=1, AvailableInstanceCount=1)
    assert short.verdict == FAIL and "it holds 1 instance(s), gpu_node_count is 2" in short.reason


def test_a_capacity_blocks_zone_replaces_a_kept_ranking():
    # A kept ranking is for zones that may move; a block's zone is the block's, whatever was cached before.
    s = settings(*P5_BLOCK, "gpu_availability_zone=us-east-2b")
    key = capacity.gpu_zones_key(s.region, s.gpu_instance_type, s.gpu_capacity_type)
    cache = p5_block_offered()
    check = capacity.check_zones(Block("none"), s, cache, context={key: {"zones": ["us-east-2a"], "basis": "probe"}})
    assert check.verdict == PASS and cache[key]["zones"] == ["us-east-2b"]
