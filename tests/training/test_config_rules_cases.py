"""Both sides of the boundaries of training/config_rules.validate that test_trainer_config.py holds on one side
only: each row names the rule it comes from (AWS's bucket naming rules, the option's documented range)."""

from __future__ import annotations

import pytest

from training.config import ConfigError, TrainConfig
from training.config_rules import validate

REAL_DATA = {"model": "o/m", "data": "/x/train.jsonl"}

ACCEPTED = [
    # --node-wait-s: -1 (no limit) or 0 .. 7 days = 604,800 s, both ends included.
    {"node_wait_s": -1}, {"node_wait_s": 0}, {"node_wait_s": 604800},
    # --precision fp8 needs full fine-tuning and a GPU: --gpu unset (Ray's GPUs decide) or set.
    {"precision": "fp8", "lora_rank": 0, "gpu": None}, {"precision": "fp8", "gpu": True},
    # --run-name: 1 + up to 127 more characters, 128 in all.
    {"run_name": "r" * 128},
    # --model-revision: a commit hash, branch or tag of up to 128 characters.
    {"model_revision": "a" * 128}, {"model_revision": "0f3c2a1"}, {"model_revision": "v1.0-rc_2"},
    # --eval-every needs validation data: --val-data is that as much as --val-fraction.
    REAL_DATA | {"val_data": "/x/val.jsonl", "eval_every": 5},
    # --lora-rank up to 4096, --lora-alpha up to 1e6, --lora-dropout below 1.
    {"lora_rank": 4096}, {"lora_rank": 1, "lora_alpha": 1e6}, {"lora_rank": 8, "lora_dropout": 0.99},
    {"lora_rank": 8, "lora_target_modules": "q_proj,k_proj"},
    # --inject-nan-at-step: 1 .. --steps, both ends.
    {"steps": 10, "inject_nan_at_step": 1}, {"steps": 10, "inject_nan_at_step": 10},
    # S3 bucket names (AWS, "General purpose bucket naming rules"): 3 to 63 characters.
    {"storage_path": "s3://abc/runs"}, {"storage_path": "s3://" + "b" * 63 + "/runs"},
    # --chat-template: a template file or a Hub model id.
    {"chat_template": "/x/chat.jinja"}, {"chat_template": "./t.j2"}, {"chat_template": "Qwen/Qwen2.5-1.5B-Instruct"},
]


@pytest.mark.parametrize("changes", ACCEPTED, ids=[str(i) for i in range(len(ACCEPTED))])
def test_the_other_end_of_each_range_is_accepted(changes):
    validate(TrainConfig(**({"model": "o/m"} | changes)))


REFUSED = [
    ({"node_wait_s": -2}, r"^--node-wait-s: -2 must be -1 \(no limit\) or between 0 and 604800$"),
    ({"node_wait_s": 604801}, r"^--node-wait-s: 604801 must be"),
    # One LoRA adapter of rank 1 is still LoRA: its frozen base gets no gradient to cast.
    ({"precision": "fp8", "lora_rank": 1}, r"^--precision: fp8 trains full weights; with --lora-rank 1 use --precision bf16$"),
    ({"precision": "fp8", "gpu": False}, r"^--precision: fp8 needs a GPU with FP8 tensor cores; --no-gpu trains on the CPU"),
    # A float option given as inf ('--predicted-step-seconds inf' parses) is no figure: a watchdog that never fires.
    ({"predicted_step_seconds": float("inf")}, r"^--predicted-step-seconds: inf must be above 0$"),
    ({"watchdog_step_seconds": float("inf")}, r"^--watchdog-step-seconds: inf must be above 0$"),
    ({"predicted_link_gbps": float("inf")}, r"^--predicted-link-gbps: inf must be above 0$"),
    ({"run_name": "r" * 129}, r"^--run-name: 'r{129}' must start with a letter, digit or '_'"),
    ({"model_revision": "a" * 129}, r"^--model-revision: 'a{129}' must be a commit hash, branch or tag"),
    ({"model_revision": "-main"}, r"^--model-revision: '-main' must be a commit hash"),  # read as an option by git
    ({"model_revision": ".."}, r"^--model-revision: '\.\.' must be a commit hash"),
    ({"model_revision": ""}, r"^--model-revision: '' must be a commit hash"),
    # Each field option is a JSON key: checked by name, whichever it is.
    ({"prompt_field": "p", "response_field": "out put"}, r"^--response-field: 'out put' must be a field name"),
    ({"text_field": "a-b"}, r"^--text-field: 'a-b' must be a field name"),
    ({"messages_field": ""}, r"^--messages-field: '' must be a field name"),
    ({"chat_template": "/x/chat template.jinja"}, r"^--chat-template: '/x/chat template.jinja' may hold only"),
    ({"chat_template": "s3://Bad_Bucket/t.jinja"}, r"^--chat-template: 's3://Bad_Bucket/t.jinja' must be s3://bucket"),
    ({"chat_template": "/x/chat.html"}, r"^--chat-template: '/x/chat.html' must be a .jinja/.j2/.txt file or a Hub model id"),
    ({"chat_template": "org--x/name"}, r"^--chat-template: 'org--x/name' must be a .jinja/.j2/.txt file or a Hub model id"),
    ({"lora_rank": 4097}, r"^--lora-rank: 4097 must be between 0 \(full fine-tuning\) and 4096$"),
    ({"lora_rank": 8, "lora_alpha": 0.0}, r"^--lora-alpha: 0.0 must be above 0"),
    ({"lora_rank": 8, "lora_dropout": 1.0}, r"^--lora-dropout: 1.0 must be in \[0, 1\)$"),
    ({"lora_rank": 8, "lora_target_modules": "q_proj,q_proj"}, r"^--lora-target-modules: 'q_proj,q_proj' must be"),
    ({"steps": 10, "inject_nan_at_step": 0}, r"^--inject-nan-at-step: 0 must be between 1 and the number of steps \(10\)$"),
    ({"steps": 10, "inject_nan_at_step": 11}, r"^--inject-nan-at-step: 11 must be between 1 and the number of steps"),
    ({"steps": 10, "inject_failure_at_step": 0}, r"^--inject-failure-at-step: 0 must be between 1"),
    # S3 bucket names: at least 3 characters, at most 63, lower-case only.
    ({"storage_path": "s3://ab/runs"}, r"^--storage-path: 's3://ab/runs' must be s3://bucket/prefix with a valid bucket"),
    ({"storage_path": "s3://" + "b" * 64 + "/runs"}, r"^--storage-path: 's3://b{64}/runs' must be s3://bucket/prefix"),
    ({"storage_path": "s3://my-Bucket/runs"}, r"^--storage-path: 's3://my-Bucket/runs' must be s3://bucket/prefix"),
]


@pytest.mark.parametrize("changes,message", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_the_value_past_each_end_is_refused_naming_its_option(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate(TrainConfig(**({"model": "o/m"} | changes)))
