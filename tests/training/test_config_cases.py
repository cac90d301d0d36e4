"""Cases of training/config.py that the other tests hold on one side only: every Qwen2.5 hub id's position limit,
each resume setting's change named, the accumulation's upper bound, and which --chat-template values are files."""

from __future__ import annotations

import dataclasses

import pytest

from training.config import ConfigError, TrainConfig, chat_template_is_file, grad_accum_for, resume_changes
from training.config_rules import validate

QWEN = [f"Qwen/Qwen2.5-{size}{kind}" for size in ("1.5B", "7B", "14B") for kind in ("", "-Instruct")]


@pytest.mark.parametrize("model", QWEN + ["qwen2.5-7b", "qwen2.5-14b"])
def test_every_qwen2_5_model_takes_32768_positions_and_no_more(model):
    """The Qwen2.5 model cards: a context of 32,768 tokens (131,072 only with YaRN, which nothing here sets)."""
    validate(TrainConfig(model=model, seq_len=32768))
    with pytest.raises(ConfigError, match=f"^--seq-len: 32769 exceeds {model}'s 32768 positions$"):
        validate(TrainConfig(model=model, seq_len=32769))


# Every setting that changes the model, the data order or the optimisation, with a second value for each.
CHANGES = {"model": "o/other", "model_revision": "v2", "seq_len": 1024, "steps": 200, "lr": 1e-4, "warmup_steps": 0,
           "min_lr_ratio": 0.0, "weight_decay": 0.0, "grad_clip": 0.5, "reduce_dtype": "bf16", "data": "/x/b.jsonl",
           "val_fraction": 0.1, "shuffle": False, "seed": 1, "text_field": "body", "messages_field": "chat",
           "prompt_field": "q", "response_field": "a", "assistant_only_loss": False, "chat_template": "/x/t.jinja",
           "default_system_prompt": False, "lora_rank": 8, "lora_alpha": 32.0, "lora_dropout": 0.1,
           "lora_target_modules": "q_proj"}


@pytest.mark.parametrize("name", CHANGES)
def test_a_resume_with_any_setting_that_changes_the_training_is_refused_by_name(name):
    saved = dataclasses.asdict(TrainConfig(model="o/m", data="/x/a.jsonl"))
    current = saved | {name: CHANGES[name]}
    [change] = resume_changes(saved, current)
    assert change.startswith(f"--{name.replace('_', '-')} {saved[name]!r} -> {CHANGES[name]!r}")


def test_a_resume_on_other_workers_at_the_same_global_batch_is_no_change():
    saved = dataclasses.asdict(TrainConfig(workers=4, micro_batch=2, grad_accum=1, log_every=5, export_hf=True))
    assert resume_changes(saved, saved | {"workers": 2, "grad_accum": 2, "log_every": 1, "export_hf": False}) == []


def test_the_accumulation_is_at_most_65536_rounds():
    """1 worker x 1 sequence x 8 tokens: 524,288 tokens are 65,536 rounds (accepted), 524,296 are 65,537."""
    assert grad_accum_for(524288, 1, 1, 8) == 65536
    with pytest.raises(ConfigError, match=r"^--batch-tokens: 524,296 is not a multiple of .* \(at most 65,536 times\)"):
        grad_accum_for(524296, 1, 1, 8)
    with pytest.raises(ConfigError, match=r"^--batch-tokens: 0 is not a multiple of .* nearest valid: 8$"):
        grad_accum_for(0, 1, 1, 8)


@pytest.mark.parametrize("value, is_file", [
    ("/x/t.jinja", True), ("./t", True), ("~/templates/chat", True), ("s3://bucket/t", True),
    ("file:///x/chat", True), ("chat.j2", True), ("chat.txt", True), ("Qwen/Qwen2.5-1.5B-Instruct", False),
])
def test_a_chat_template_is_a_file_by_its_path_or_suffix_else_a_hub_id(value, is_file):
    assert chat_template_is_file(value) is is_file


@pytest.mark.parametrize("data", ["/x/train.jsonl", "/x/train.json", "/x/train.parquet"])
def test_each_data_file_format_is_accepted(data):
    validate(TrainConfig(model="o/m", data=data))


def test_a_global_batch_given_in_tokens_is_counted_in_sequences():
    """--batch-tokens 65536 at --seq-len 2048 is 32 sequences: the same as 8 workers x 1 x 4, not as 8 x 1 x 2."""
    in_tokens = dataclasses.asdict(TrainConfig(batch_tokens=65536, seq_len=2048, workers=8, micro_batch=1))
    explicit = in_tokens | {"batch_tokens": None, "grad_accum": 4}
    assert resume_changes(in_tokens, explicit) == []
    [change] = resume_changes(in_tokens, explicit | {"grad_accum": 2})
    assert change.endswith("32 -> 16 sequences")


def test_a_setting_an_older_checkpoint_did_not_record_is_not_a_change():
    saved = dataclasses.asdict(TrainConfig())
    del saved["lora_rank"], saved["default_system_prompt"]
    assert resume_changes(saved, dataclasses.asdict(TrainConfig(lora_rank=8, default_system_prompt=False))) == []


def test_the_defaults_follow_the_libraries_that_own_them():
    """Ray's FailureConfig: max_failures 0 (no retry unless asked); transformers' TrainingArguments: max_grad_norm 1.0."""
    cfg = TrainConfig()
    assert (cfg.max_failures, cfg.grad_clip) == (0, 1.0)
