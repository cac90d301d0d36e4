"""LoRA settings: their one-line refusals, and what planning.plan says needs LoRA on 8 x L4."""

from __future__ import annotations

import re

import pytest

from training.config import ConfigError, TrainConfig
from training.config_rules import validate
from training.inputs import check_inputs


@pytest.mark.parametrize("changes,message", [
    ({"lora_rank": -1}, "--lora-rank: -1 must be between 0 (full fine-tuning) and 4096"),
    ({"lora_rank": 4097}, "--lora-rank: 4097 must be between 0 (full fine-tuning) and 4096"),
    ({"lora_alpha": 0.0}, "--lora-alpha: 0.0 must be above 0 (at most 1e6)"),
    ({"lora_alpha": 1e6 + 1}, "--lora-alpha: 1000001.0 must be above 0 (at most 1e6)"),
    ({"lora_dropout": 1.0}, "--lora-dropout: 1.0 must be in [0, 1)"),
    ({"lora_dropout": -0.1}, "--lora-dropout: -0.1 must be in [0, 1)"),
    ({"lora_target_modules": "q_proj,q_proj"}, "--lora-target-modules: 'q_proj,q_proj' must be all-linear or distinct "
     "module names separated by commas (letters, digits, '_')"),
    ({"lora_target_modules": "q_proj, v_proj"}, "--lora-target-modules: 'q_proj, v_proj' must be all-linear or distinct "
     "module names separated by commas (letters, digits, '_')"),
])
def test_bad_lora_settings_are_refused_in_one_line(changes, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        validate(TrainConfig(**changes))


@pytest.mark.parametrize("changes", [{"lora_rank": 0}, {"lora_rank": 4096, "lora_dropout": 0.99},
                                     {"lora_rank": 8, "lora_target_modules": "q_proj,v_proj"}])
def test_the_ends_of_the_lora_ranges_are_accepted(changes):
    validate(TrainConfig(**changes))


def test_a_target_module_the_architecture_lacks_is_refused_before_ray_starts():
    cfg = validate(TrainConfig(model="tiny", lora_rank=8, lora_target_modules="q_proj,qkv_proj"))
    with pytest.raises(ConfigError, match=r"^--lora-target-modules: qkv_proj not among the linear layers of qwen2's "
                                          r"decoder layers \(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj\)$"):
        check_inputs(cfg)


def test_the_planners_new_shapes_have_the_model_cards_parameter_counts():
    from planning.workload import MODELS

    # Qwen2.5's model cards: 7.61B and 14.7B parameters (cut, not rounded).
    assert 7.61e9 <= MODELS["qwen2.5-7b"].params < 7.62e9
    assert 14.7e9 <= MODELS["qwen2.5-14b"].params < 14.8e9


def test_the_planners_adapter_count_is_pefts():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.model import builtin_config
    from planning.workload import MODELS

    lm = get_peft_model(AutoModelForCausalLM.from_config(builtin_config("tiny")),
                        LoraConfig(r=8, target_modules="all-linear"))
    trainable, _ = lm.get_nb_trainable_parameters()
    assert MODELS["tiny"].trained_params(8) == trainable


@pytest.mark.parametrize("model,needs_lora", [("qwen2.5-1.5b", False), ("qwen2.5-7b", True), ("qwen2.5-14b", True)])
def test_the_planner_says_which_models_need_lora_on_8_l4(model, needs_lora, capsys):
    from planning.plan import main

    # Full fine-tuning keeps 16 bytes per parameter (fp32 weight, gradient, two AdamW moments): over
    # 8 GPUs, 15 GB for 7.6B and 30 GB for 14.8B, against 24 GB L4s that also hold activations.
    assert main(["--model", model, "--instance-type", "g6.12xlarge", "--nodes", "2", "--profile", "l4"]) == 0
    out = capsys.readouterr().out
    assert ("\nauto: nothing fits: " in out) == needs_lora
    assert ("\nLoRA fits (--lora-rank 16: " in out) == needs_lora
    if needs_lora:
        lora_line = out.splitlines()[-1]
        assert float(re.search(r"\(([\d.]+) GiB/GPU of 24 GB\)\)$", lora_line).group(1)) < 24e9 / 2**30


def test_the_planner_refuses_a_negative_lora_rank(capsys):
    from planning.plan import main

    assert main(["--lora-rank", "-1"]) == 2
    assert capsys.readouterr().err == "error: --nodes and --steps must be at least 1, --lora-rank at least 0\n"
