"""training.export, case by case: what a LoRA export tells its loaders (adapter_config.json, which peft's
AutoPeftModelForCausalLM reads to fetch the base model) and its reader (README.md), and an export of adapters
not trained yet (peft's B = 0 initialisation)."""

from __future__ import annotations

import json

import pytest
import torch

from training.config import TrainConfig
from training.export import merged_weights, readme, save_adapter
from training.model import builtin_config, lora_config, with_adapters


def test_the_readme_states_the_share_kept_the_rank_and_alpha_and_the_base_to_serve_on():
    cfg = TrainConfig(model="tiny", lora_rank=8, lora_alpha=32.0)
    text = readme(cfg, 0.90349)
    assert "**bf16 keeps 90.3% of the adapters' update**" in text
    assert "(fp32, rank 8, alpha 32)" in text
    # vLLM refuses an adapter whose rank exceeds --max-lora-rank (vllm/lora/peft_helper.py validate_legal).
    assert "a --max-lora-rank of at least 8." in text
    assert "Serve it on tiny in bf16" in text


def test_the_adapter_config_names_the_base_model_and_revision_it_was_trained_on(tmp_path):
    """AutoPeftModelForCausalLM.from_pretrained(adapter/) loads base_model_name_or_path at `revision`
    (peft/auto.py): another base or revision would serve the adapters on weights they were not trained on."""
    cfg = TrainConfig(model="tiny", model_revision="v1.2", lora_rank=4, lora_alpha=16.0)
    config = builtin_config("tiny")
    save_adapter({}, cfg, config, lora_config(cfg), tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (saved["base_model_name_or_path"], saved["revision"]) == ("tiny", "v1.2")
    assert (saved["task_type"], saved["inference_mode"], saved["r"], saved["lora_alpha"]) == ("CAUSAL_LM", True, 4, 16.0)


@pytest.fixture(scope="module")
def untrained():
    """A tiny model's trainer state with its adapters as peft initialises them (lora_B zero): an export at the
    first checkpoint of a run, or of a run with --lr 0."""
    from transformers import AutoModelForCausalLM

    cfg = TrainConfig(model="tiny", lora_rank=4, lora_alpha=16.0)
    config = builtin_config("tiny")
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(config)
    state = with_adapters({f"lm.{k}": v for k, v in base.state_dict().items()}, cfg, config)
    assert all(not v.any() for k, v in state.items() if ".lora_B." in k)
    return state, config, lora_config(cfg)


def test_adapters_not_trained_yet_export_the_base_weights_and_keep_all_of_their_nil_update(untrained):
    state, config, lora = untrained
    weights, kept = merged_weights(state, config, lora)
    assert kept == 1.0  # nothing to round away: no division by the zero update
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(weights[name], state[f"lm.{name.replace('.weight', '.base_layer.weight')}"].to(torch.bfloat16))


def test_a_tensor_with_the_right_count_in_the_wrong_shape_fails_the_export():
    """A transposed matrix holds as many numbers as the architecture's: only its shape tells, and loading it would
    fail later with a traceback (or serve a scrambled layer)."""
    from transformers import AutoModelForCausalLM

    from training.export import ExportError

    config = builtin_config("tiny")
    state = {f"lm.{k}": v for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
    name = "model.layers.0.mlp.gate_proj.weight"
    rows, columns = state[f"lm.{name}"].shape
    assert rows != columns
    state[f"lm.{name}"] = state[f"lm.{name}"].t().contiguous()
    with pytest.raises(ExportError, match=rf"1 tensor\(s\) have the wrong shape, e\.g\. {name}: \({columns}, {rows}\), "
                                          rf"the architecture's \({rows}, {columns}\)"):
        merged_weights(state, config)
