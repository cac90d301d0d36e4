"""planning.families against transformers' own models, built on the meta device from the same config."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from planning.families import FAMILIES, ShapeError, count_shape

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, vocab_size=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# Each family once as configured by default, and the flags that add parameters turned on.
CASES = [(t, {}) for t in FAMILIES] + [
    ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("llama", {"tie_word_embeddings": True}),
    ("granite", {"attention_bias": True}),
    ("qwen3", {"attention_bias": True}),
    ("cohere", {"use_qk_norm": True}),
    ("phi", {"qk_layernorm": True}),
    ("stablelm", {"use_qkv_bias": True, "qk_layernorm": True}),
    ("stablelm", {"use_parallel_residual": True}),
    ("gemma", {"head_dim": 32}),
    ("starcoder2", {"use_bias": False}),
    ("glm", {"attention_bias": False}),
]


def reference(model_type: str, extra: dict) -> tuple[dict, dict]:
    """The config.json transformers writes for these fields, and what its model holds."""
    config = AutoConfig.for_model(model_type, **SMALL, **extra)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    layers = lm.model.layers
    linear = sum(m.in_features + m.out_features for m in layers[0].modules() if isinstance(m, torch.nn.Linear))
    total = sum(p.numel() for p in lm.parameters())
    layer_params = sum(p.numel() for p in layers.parameters())
    return config.to_dict(), {"layer_params": layer_params, "root_params": total - layer_params, "linear_in_out": linear}


@pytest.mark.parametrize(("model_type", "extra"), CASES, ids=[f"{t}-{'-'.join(e) or 'default'}" for t, e in CASES])
def test_counts_what_transformers_builds(model_type, extra):
    config, built = reference(model_type, extra)
    counted = count_shape(config)
    assert {k: counted[k] for k in built} == built


@pytest.mark.parametrize(("model_type", "extra"), CASES, ids=[f"{t}-{'-'.join(e) or 'default'}" for t, e in CASES])
def test_counts_what_transformers_builds_from_the_cached_fields(model_type, extra):
    # A hub model is counted from the fields cached in cdk.context.json, not from its whole config.json:
    # every flag a family reads must survive the cache (StarCoder2's use_bias did not).
    from planning.model_config import shape_fields

    config, built = reference(model_type, extra)
    counted = count_shape(shape_fields(config))
    assert {k: counted[k] for k in built} == built


def test_published_sizes():
    # Qwen2.5-1.5B's config.json (hub, revision main): 1,543,714,304 parameters as its model card states.
    qwen = {"model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
            "num_key_value_heads": 2, "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True}
    shape = count_shape(qwen)
    assert shape["layer_params"] + shape["root_params"] == 1_543_714_304


def test_unknown_family_names_the_counted_ones():
    with pytest.raises(ShapeError, match=r"m: model_type 'gpt2' is not one the planner counts \(cohere, cohere2, gemma"):
        count_shape({"model_type": "gpt2"}, "m")


def test_missing_field_is_named():
    config = {"model_type": "llama", **SMALL}
    del config["intermediate_size"]
    with pytest.raises(ShapeError, match=r"m: config.json has no positive integer 'intermediate_size' \(got None\)"):
        count_shape(config, "m")


def test_the_planner_counts_every_family_the_trainer_trains():
    from training.families import MODEL_TYPES

    assert set(FAMILIES) == set(MODEL_TYPES)


# Families whose config class ties the LM head to the embedding when config.json says nothing (transformers 5.23).
TIED_BY_DEFAULT = ["gemma", "gemma2", "gemma3_text", "cohere", "cohere2", "starcoder2"]


def test_each_familys_default_tie_is_its_transformers_config_classs_default():
    from transformers import CONFIG_MAPPING

    defaults = {t: bool(CONFIG_MAPPING[t]().tie_word_embeddings) for t in FAMILIES}
    assert sorted(t for t, tied in defaults.items() if tied) == sorted(TIED_BY_DEFAULT)
    assert {t: f.tied_default for t, f in FAMILIES.items()} == defaults


@pytest.mark.parametrize("model_type", TIED_BY_DEFAULT + ["llama"])
def test_a_config_json_without_tie_word_embeddings_counts_what_transformers_builds(model_type):
    from planning.model_config import shape_fields

    config, built = reference(model_type, {})  # the model transformers builds with its class's default
    del config["tie_word_embeddings"]
    for fields in (config, shape_fields(config)):  # read where it is, or from the cdk.context.json cache
        counted = count_shape(fields)
        assert {k: counted[k] for k in built} == built


def test_gemma2_2b_without_tie_word_embeddings_has_its_published_count():
    # google/gemma-2-2b's shape fields; its weights hold 2,614,341,888 parameters (the Hub's count of the
    # safetensors, "2.61B params"): one 256000 x 2304 embedding, shared with the LM head. Untied it would be
    # 589,824,000 more.
    gemma2 = {"model_type": "gemma2", "hidden_size": 2304, "num_hidden_layers": 26, "num_attention_heads": 8,
              "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 9216, "vocab_size": 256000}
    shape = count_shape(gemma2)
    assert shape["layer_params"] + shape["root_params"] == 2_614_341_888
