"""Shared fixtures: the app's context, and synthesized templates cached per settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from stacks.settings import settings_from_context
from stacks.training_cluster import EfaTrainingStack

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def base_context() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())["context"]


# Set by `make mutation`: a synthesis takes seconds, too slow to repeat for every mutant, so tests that
# need one are skipped there and the pure functions' own tests judge the mutants.
UNDER_MUTATION = os.environ.get("EKS_FSDP_EFA_MUTATION") == "1"


def synth_stack(**overrides) -> EfaTrainingStack:
    """Build the stack as `cdk synth -c key=value ...` would (cdk-nag not attached)."""
    if UNDER_MUTATION:
        pytest.skip("no synthesis under mutation testing")
    context = base_context() | overrides
    app = cdk.App(context=context)
    return EfaTrainingStack(app, "Test", settings_from_context(context))


_templates: dict[str, Template] = {}


def template_for(**overrides) -> Template:
    key = json.dumps(overrides, sort_keys=True)
    if key not in _templates:
        _templates[key] = Template.from_stack(synth_stack(**overrides))
    return _templates[key]


@pytest.fixture(scope="session")
def template() -> Template:
    """The default deployment's template."""
    return template_for()


def resources_of(template: Template, resource_type: str) -> dict[str, dict]:
    return {k: v for k, v in template.to_json()["Resources"].items() if v["Type"] == resource_type}


def only(template: Template, resource_type: str, predicate=lambda r: True) -> dict:
    matches = [r for r in resources_of(template, resource_type).values() if predicate(r)]
    assert len(matches) == 1, f"expected one {resource_type}, found {len(matches)}"
    return matches[0]
