"""stacks/validation.py: a Hub-dataset spelling of a home-relative folder names nothing in the pods."""

from __future__ import annotations

import pytest

from stacks.context import settings_from_context
from stacks.settings import SettingsError
from tests.conftest import base_context


@pytest.mark.parametrize("key, value", [("training.data", "hf:~/saved:train"),
                                        ("training.val_data", "hf:~/saved:test")])
def test_a_home_relative_saved_dataset_is_refused_as_a_relative_path(key, value):
    # `~` is the user's home on a laptop, not in the pods (their home is the image's): hf:~/x is a folder, not a Hub id.
    overrides = {key: value} | ({"training.data": "/data/train.jsonl"} if key == "training.val_data" else {})
    with pytest.raises(SettingsError, match=rf"^{key}: '{value}' is not an absolute path, and the pods' working "):
        settings_from_context(base_context() | overrides)


@pytest.mark.parametrize("region, partition", [("us-east-2", "aws"), ("cn-north-1", "aws-cn")])
def test_each_region_is_found_in_its_own_partition(region, partition):
    # botocore's endpoint data: China's regions are in a partition of their own (ARNs arn:aws-cn:...), which
    # admin_principal_arn's partition is checked against.
    from stacks.validation import region_partition

    assert region_partition(region) == partition


@pytest.mark.parametrize("zone", ["us-east-2", "us-east-2ab", "us-east-21a"])
def test_a_zone_is_the_region_and_one_letter(zone):
    # EC2 names a region's AZs <region><letter> (us-east-2a); the region itself or a longer name is no AZ of it.
    with pytest.raises(SettingsError, match=rf"^availability_zones: '{zone}' is not an AZ of region us-east-2 "):
        settings_from_context(base_context() | {"availability_zones": f"us-east-2a,{zone}"})
