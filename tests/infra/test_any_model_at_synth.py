"""`auto` for any model the trainer accepts: the synth sizes it from its config.json, cached in cdk.context.json
(planning.model_config), and refuses in one line what it can't read or the trainer doesn't train."""

from __future__ import annotations

import json
import shlex

import pytest

import planning.model_config as model_config
from stacks.context import settings_from_context
from stacks.settings import SettingsError, planned_trainer_options
from tests.conftest import base_context

# meta-llama/Llama-3.2-1B's config.json (its shape fields): 1,235,814,400 parameters.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
         "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192,
         "vocab_size": 128256, "tie_word_embeddings": True}
KEY = "model-config:meta-llama/Llama-3.2-1B@4e20de362430cd3b72f300e6b0f18e50e7166e08"
SETTINGS = {"training.model": "meta-llama/Llama-3.2-1B", "training.model_revision": "4e20de362430cd3b72f300e6b0f18e50e7166e08"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The project's cdk.context.json, as a file of the test's own."""
    path = tmp_path / "cdk.context.json"
    monkeypatch.setattr(model_config, "PROJECT_CONTEXT_FILE", path)
    return path


def test_a_cached_hub_model_gets_explicit_settings_for_the_pods(cache):
    cache.write_text(json.dumps({KEY: LLAMA}))
    options, line = planned_trainer_options(settings_from_context(base_context() | SETTINGS))
    assert options["micro_batch"] != "auto" and options["activation_checkpointing"] != "auto"
    assert options["sharding"] in ("full", "hybrid") and options["predicted_step_seconds"] > 0
    assert line.startswith("auto: ")


def test_an_uncached_hub_model_offline_is_refused_naming_the_key_and_the_way_out(cache):
    with pytest.raises(SettingsError) as refused:
        settings_from_context(base_context() | SETTINGS)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("training.model: meta-llama/Llama-3.2-1B's config.json is not cached")
    assert f"'{KEY}'" in message and message.endswith(
        "or set training.micro_batch, training.activation_checkpointing and training.sharding instead of auto")


def test_explicit_settings_need_no_shape(cache):
    s = settings_from_context(base_context() | SETTINGS | {"training.micro_batch": 1, "training.activation_checkpointing": "full",
                                                           "training.sharding": "hybrid"})
    assert planned_trainer_options(s)[0]["micro_batch"] == 1


def test_a_family_the_trainer_does_not_train_is_refused_at_synth(cache):
    cache.write_text(json.dumps({KEY: LLAMA | {"model_type": "mixtral"}}))
    with pytest.raises(SettingsError, match=r"^training.model: the model's architecture 'mixtral' is not one whose loss "
                                            r"the trainer checks; supported: cohere, "):
        settings_from_context(base_context() | SETTINGS)


def test_a_lookup_is_cached_for_the_next_synth(cache, monkeypatch):
    cache.write_text(json.dumps({"availability-zones:account=1:region=r": ["a"]}))
    looked_up = []

    def fetch(model, revision):
        looked_up.append((model, revision))
        return LLAMA | {"rope_theta": 500000.0}

    monkeypatch.setattr(model_config, "_fetch", fetch)
    settings_from_context(base_context() | SETTINGS)
    stored = json.loads(cache.read_text())
    assert stored == {"availability-zones:account=1:region=r": ["a"], KEY: LLAMA}
    settings_from_context(base_context() | SETTINGS)
    assert looked_up == [("meta-llama/Llama-3.2-1B", "4e20de362430cd3b72f300e6b0f18e50e7166e08")]  # once


def test_the_synth_resolves_auto_once_and_reads_the_context_file_once(cache, monkeypatch):
    """Validation and the stack each ask for the planned options of one Settings: the planner runs once and
    cdk.context.json is read once (the stack asks as the second caller here does)."""
    import planning.auto

    calls = {"resolve": 0, "read": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(planning.auto, "resolve_options", counted("resolve", planning.auto.resolve_options))
    monkeypatch.setattr(model_config, "project_context", counted("read", model_config.project_context))
    s = settings_from_context(base_context())
    first, second = planned_trainer_options(s), planned_trainer_options(s)
    assert calls == {"resolve": 1, "read": 1} and first == second
    first[0]["steps"] = -1  # a caller's copy: the next caller still gets the planned options
    assert planned_trainer_options(s)[0]["steps"] == base_context()["training"]["steps"]
