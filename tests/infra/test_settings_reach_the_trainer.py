"""Each training setting that is a trainer option, moved off its default, reaches the trainer as that value.

The RayJob's entrypoint is built by the same pure functions the stack uses (pure_workload), split as the
submitter's shell splits it, and parsed by the trainer's own command line (training.command_line.parse_args).
What the trainer then does with each option is tested where the library acts (docs/testing.md, "Two
values for every setting").
"""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from stacks.settings import TrainingSettings
from tests.conftest import pure_workload
from training.command_line import parse_args

# A valid non-default value of every trainer-option setting (each moved alone from the app's context).
MOVED = {
    "model": "Qwen/Qwen2.5-1.5B-Instruct",
    "model_revision": "0123456789abcdef0123456789abcdef01234567",
    "steps": 300,
    "seq_len": 1024,
    "micro_batch": 2,
    "batch_tokens": 131072,
    "learning_rate": 1e-4,
    "data": "s3://training-data-bucket/corpus.jsonl",
    "text_field": "body",
    "messages_field": "conversation",
    "prompt_field": "question",
    "response_field": "answer",
    "assistant_only_loss": False,
    "chat_template": "s3://training-data-bucket/template.jinja",
    "default_system_prompt": False,
    "shuffle": False,
    "val_data": "s3://training-data-bucket/validation.jsonl",
    "val_fraction": 0.1,
    "eval_every": 20,
    "activation_checkpointing": "selective",
    "compile": False,
    "sharding": "full",
    "reduce_dtype": "fp32",
    "reshard_after_forward": False,
    "loss_chunk_tokens": 4096,
    "checkpoint_every": 25,
    "async_checkpoint": False,
    "max_failures": 5,
    "require_efa": False,
    "precision": "fp8",
    "tracking": "mlflow",
    "mlflow_tracking_uri": "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team",
    "mlflow_experiment": "qwen-fine-tunes",
    "wandb_project": "qwen",
    "wandb_entity": "ml-team",
}
# Settings that only make sense with a partner setting moved too.
PARTNERS = {"prompt_field": {"response_field": "answer"}, "response_field": {"prompt_field": "question"},
            "eval_every": {"val_fraction": 0.1}, "val_data": {"data": MOVED["data"]},
            "tracking": {"mlflow_tracking_uri": MOVED["mlflow_tracking_uri"]}, "mlflow_tracking_uri": {"tracking": "mlflow"},
            "mlflow_experiment": {"tracking": "mlflow", "mlflow_tracking_uri": MOVED["mlflow_tracking_uri"]},
            "wandb_project": {"tracking": "wandb", "wandb_api_key_secret": "wandb-key"},
            "wandb_entity": {"tracking": "wandb", "wandb_api_key_secret": "wandb-key"}}

OPTIONS = {f.name: f.metadata["trainer_option"] or f.name
           for f in dataclasses.fields(TrainingSettings) if "trainer_option" in f.metadata}


def test_every_trainer_option_setting_has_a_moved_value():
    assert sorted(MOVED) == sorted(OPTIONS)


def test_each_moved_value_differs_from_its_default():
    defaults = TrainingSettings()
    assert [name for name, value in MOVED.items() if getattr(defaults, name) == value] == []


def trainer_config_of(settings: dict):
    entrypoint = pure_workload(**{f"training.{k}": v for k, v in settings.items()})["RayJob"]["spec"]["entrypoint"]
    argv = shlex.split(entrypoint)
    assert argv[:3] == ["python", "-m", "training.train"]
    return parse_args(argv[3:])


@pytest.mark.parametrize("setting", sorted(MOVED))
def test_the_trainer_sees_the_moved_setting(setting):
    config = trainer_config_of({setting: MOVED[setting]} | PARTNERS.get(setting, {}))
    assert getattr(config, OPTIONS[setting]) == MOVED[setting]
