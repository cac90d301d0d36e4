"""README's settings table states the defaults that synth deploys (cdk.json's context over the dataclasses)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from stacks.context import settings_from_context
from stacks.settings import Settings, TrainingSettings
from tests.conftest import ROOT, base_context

HEADER = "| key | default | meaning |"


def documented_defaults(readme: str) -> dict[str, str]:
    """Rows `| a / b | x / y | ... |`, one key per ` / `-part; `training.a / b` gives training.a and training.b."""
    lines = readme.splitlines()
    start = lines.index(HEADER) + 2
    documented = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        keys_cell, defaults_cell = (cell.strip() for cell in line.strip("|").split("|")[:2])
        keys, defaults = keys_cell.split(" / "), defaults_cell.split(" / ")
        assert len(keys) == len(defaults), f"README row {keys_cell!r}: {len(keys)} keys but {len(defaults)} defaults"
        prefix = "training." if keys[0].startswith("training.") else ""
        for key, default in zip(keys, defaults):
            documented[prefix + key.removeprefix("training.")] = default
    return documented


def matches(documented: str, value) -> bool:
    """The README's way of writing a value: null, true/false, 65,536, 2e-5, a, b (a list), k=v (tags), ...suffix."""
    if value is None or isinstance(value, bool):
        return documented == {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        try:
            return float(documented.replace(",", "")) == value
        except ValueError:
            return False
    if isinstance(value, tuple):
        return documented == ", ".join(value)
    if isinstance(value, dict):
        return documented == ", ".join(f"{k}={v}" for k, v in value.items())
    if documented.startswith("..."):
        return value.endswith(documented.removeprefix("..."))
    return documented == value


def deployed() -> dict:
    s = settings_from_context(base_context())
    values = {f.name: getattr(s, f.name) for f in dataclasses.fields(Settings) if f.name != "training"}
    return values | {f"training.{f.name}": getattr(s.training, f.name) for f in dataclasses.fields(TrainingSettings)}


@pytest.fixture(scope="module")
def readme_defaults() -> dict[str, str]:
    return documented_defaults((ROOT / "README.md").read_text())


def test_every_setting_is_in_the_readme_table_and_nothing_else(readme_defaults):
    assert sorted(readme_defaults) == sorted(deployed())


def test_each_documented_default_is_what_synth_deploys(readme_defaults):
    values = deployed()
    wrong = {key: (text, values[key]) for key, text in readme_defaults.items() if key in values and not matches(text, values[key])}
    assert wrong == {}


def test_a_wrong_documented_default_is_found():
    table = f"{HEADER}\n| --- | --- | --- |\n| training.steps / seq_len | 200 / 4096 | x |\n"
    documented = documented_defaults(table)
    assert documented == {"training.steps": "200", "training.seq_len": "4096"}
    assert matches(documented["training.steps"], 200) and not matches(documented["training.seq_len"], 2048)


@pytest.mark.parametrize("text,value", [
    ("null", None), ("true", True), ("65,536", 65536), ("2e-5", 2e-5), ("us-east-2a, us-east-2b", ("us-east-2a", "us-east-2b")),
    ("project=eks-fsdp-efa", {"project": "eks-fsdp-efa"}), ("...ray:train-ml-cuda-v1.1", "public.ecr.aws/x/ray:train-ml-cuda-v1.1"),
])
def test_the_readmes_forms_of_writing_a_value(text, value):
    assert matches(text, value)
