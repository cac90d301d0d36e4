"""stacks/validation.py: both sides of the rules a one-character change would move."""

from __future__ import annotations

import pytest

from stacks.context import settings_from_context
from stacks.settings import SettingsError
from tests.conftest import base_context


def settings(**overrides):
    return settings_from_context(base_context() | overrides)


# EC2 API reference, CapacityReservation.CapacityReservationId: cr- and 17 hex digits (cr-0123456789abcdef0); the
# shorter 8-digit form of older resource IDs never existed for reservations.
@pytest.mark.parametrize("reservation_id", ["cr-0123456789abcdef", "cr-0123456789abcdef01", "cr-0123456789ABCDEF0",
                                            "cr-0123456789abcdeg0", "0123456789abcdef012"])
def test_a_reservation_id_that_is_not_cr_and_17_hex_digits_is_refused(reservation_id):
    with pytest.raises(SettingsError, match=rf"^capacity_reservation_id: '{reservation_id}' must look like "
                                            r"cr-0123456789abcdef0 \(cr- and 17 hex digits\)$"):
        settings(capacity_reservation_id=reservation_id)


def test_a_reservation_id_of_cr_and_17_hex_digits_is_accepted():
    assert settings(capacity_reservation_id="cr-0123456789abcdef0").capacity_reservation_id == "cr-0123456789abcdef0"


# EC2 User Guide, "Capacity Reservations for cluster placement groups": a reservation launches only into the group it
# was made in, so `on` (a new group) is refused; auto and off make none, and an on-demand reservation is targeted.
@pytest.mark.parametrize("placement_group", ["auto", "off"])
def test_an_on_demand_reservation_is_accepted_without_a_new_placement_group(placement_group):
    s = settings(capacity_reservation_id="cr-0123456789abcdef0", placement_group=placement_group)
    assert (s.gpu_capacity_type, s.use_placement_group) == ("on-demand", False)


# A Secret's name is a DNS subdomain (Kubernetes "Object Names and IDs"): at most 253 characters.
@pytest.mark.parametrize("length, accepted", [(253, True), (254, False)])
def test_an_hf_token_secret_name_may_hold_253_characters(length, accepted):
    name = "a" * length
    if accepted:
        assert settings(**{"training.hf_token_secret": name}).training.hf_token_secret == name
    else:
        with pytest.raises(SettingsError, match=r"^training.hf_token_secret: 'a+' must be a Kubernetes Secret name"):
            settings(**{"training.hf_token_secret": name})


# EKS Kubernetes release calendar (late 2026): 1.31 is the oldest version EKS still creates, so its refusal is for
# the missing kubectl layer, which the user can add; 1.37 does not exist yet.
@pytest.mark.parametrize("version, message", [
    ("1.31", r"^kubernetes_version: 1.31 has no matching kubectl layer installed; allowed: 1.36 \(add "
             r"aws-cdk.lambda-layer-kubectl-v31 to support it\)$"),
    ("1.37", r"^kubernetes_version: '1.37' is not a version EKS creates; allowed: 1.36$"),
])
def test_a_version_eks_creates_without_a_kubectl_layer_names_the_layer_to_add(version, message):
    with pytest.raises(SettingsError, match=message):
        settings(kubernetes_version=version)


# The pull-through cache's upstream is the registry public.ecr.aws itself (ECR CreatePullThroughCacheRule): a host
# that merely starts with those letters is another registry.
@pytest.mark.parametrize("image", ["public.ecr.aws.example.com/org/ray:2.58.0", "docker.io/rayproject/ray:2.58.0"])
def test_the_pull_through_cache_refuses_an_image_of_another_registry(image):
    with pytest.raises(SettingsError, match=r"^image_pull_through_cache: caches public.ecr.aws images only, "):
        settings(**{"training.image": image})
