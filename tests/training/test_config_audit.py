"""The GPU profiles' documented settings, and resume checks where a setting is dropped to its unset value."""

import dataclasses

import pytest

from training.command_line import parse_args
from training.config import TrainConfig, resume_changes


@pytest.mark.parametrize("profile, expected", [
    # docs/benchmarks.md: the h200 profile is 8 x 4096, no recomputation, compiled, loss chunk 8192, and keeps the
    # gathered weights ("reshard_after_forward off: kept for the h200 profile", +1.9%).
    ("h200", {"seq_len": 4096, "micro_batch": 8, "grad_accum": 1, "activation_checkpointing": "none", "compile": True,
              "loss_chunk_tokens": 8192, "reshard_after_forward": False}),
    # The l4 profile: 1 x 2048 x 4 accumulation, full recomputation, compiled, loss chunk 2048, weights resharded.
    ("l4", {"seq_len": 2048, "micro_batch": 1, "grad_accum": 4, "activation_checkpointing": "full", "compile": True,
            "loss_chunk_tokens": 2048, "reshard_after_forward": True}),
])
def test_each_profile_sets_its_documented_settings(profile, expected):
    cfg = parse_args(["--profile", profile])
    assert {k: getattr(cfg, k) for k in expected} == expected


@pytest.mark.parametrize("name, before", [
    ("model_revision", "v1"), ("chat_template", "/x/t.jinja"), ("prompt_field", "q"), ("response_field", "a"),
])
def test_a_resume_that_unsets_a_setting_is_refused_by_name(name, before):
    """A checkpoint made with a setting, resumed without it (None): another model revision, template or field."""
    saved = dataclasses.asdict(TrainConfig(model="o/m", data="/x/a.jsonl")) | {name: before}
    current = saved | {name: None}
    assert resume_changes(saved, current) == [f"--{name.replace('_', '-')} {before!r} -> None"]


@pytest.mark.parametrize("batch_tokens, nearest", [
    (524_296, "524,288"),  # 65,537 rounds of 8 tokens: the nearest valid batch is the cap's 65,536 rounds
    (524_299, "524,288"),
    (524_290, "524,288"),  # 65,536 rounds and a remainder: one round more is past the cap
    (524_287, "524,280 or 524,288"),  # below the cap, both neighbours are valid
])
def test_the_nearest_valid_batch_is_never_past_the_accumulation_cap(batch_tokens, nearest):
    """1 worker x 1 sequence x 8 tokens, --grad-accum at most 65,536: the refusal's suggestions must be accepted."""
    from training.config import ConfigError, grad_accum_for

    with pytest.raises(ConfigError, match=f"nearest valid: {nearest}$"):
        grad_accum_for(batch_tokens, 1, 1, 8)
