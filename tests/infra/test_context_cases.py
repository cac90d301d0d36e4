"""stacks/context.py case by case: how a `-c` string or a cdk.json value becomes a setting, and which of two
spellings of a training setting wins."""

from __future__ import annotations

import pytest

from stacks.context import settings_from_context
from stacks.settings import SettingsError
from tests.conftest import base_context


def settings(**overrides):
    return settings_from_context(base_context() | overrides)


def test_a_dotted_training_key_wins_over_the_training_object_in_either_order():
    # `-c training.steps=70` overrides cdk.json's training object, whichever of the two CDK hands over first.
    training = base_context()["training"] | {"steps": 60}
    first = {k: v for k, v in base_context().items() if k != "training"} | {"training.steps": "70", "training": training}
    assert settings_from_context(first).training.steps == 70
    assert settings_from_context(base_context() | {"training": training, "training.steps": "70"}).training.steps == 70


def test_the_training_object_given_as_json_text():
    assert settings(training='{"steps": 70}').training.steps == 70


def test_a_negative_cli_integer_is_an_integer_that_the_range_refuses():
    with pytest.raises(SettingsError, match=r"^gpu_node_count: -1 must be between 1 and 64$"):
        settings(gpu_node_count="-1")


def test_a_boolean_is_no_number():
    with pytest.raises(SettingsError, match=r"^training.learning_rate: expected a number, got True$"):
        settings(**{"training.learning_rate": True})


@pytest.mark.parametrize("raw,parsed", [("4", 4), (4, 4), ("auto", "auto"), (" 2 ", 2)])
def test_an_integer_or_a_word_reads_a_number_as_the_integer(raw, parsed):
    assert settings(**{"training.micro_batch": raw}).training.micro_batch == parsed


def test_a_comma_list_drops_blanks_and_spaces():
    s = settings(availability_zones=" us-east-2a , , us-east-2b ,", gpu_availability_zone="us-east-2b", nat_gateways=1)
    assert s.availability_zones == ("us-east-2a", "us-east-2b")


def test_a_string_setting_is_read_without_surrounding_spaces():
    assert settings(gpu_instance_type=" g6.12xlarge ").gpu_instance_type == "g6.12xlarge"
