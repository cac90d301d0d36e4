"""The LoRA settings where peft acts on them: the adapters' dropout, and the dtypes add_lora leaves."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM

from training.config import TrainConfig
from training.model import add_lora, builtin_config, lora_config


def _tiny_with_lora(**settings) -> nn.Module:
    cfg = TrainConfig(model="tiny", lora_rank=4, lora_alpha=8.0, lora_target_modules="all-linear", **settings)
    lm = AutoModelForCausalLM.from_config(builtin_config("tiny"), dtype=torch.float32)
    add_lora(lm, lora_config(cfg))
    return lm


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_lora_dropout_reaches_every_adapter(dropout):
    # peft (tuners/lora/layer.py update_layer): an adapter's input goes through nn.Dropout(p=lora_dropout) when
    # lora_dropout > 0, through nn.Identity when it is 0.
    modules = [m["default"] for name, m in _tiny_with_lora(lora_dropout=dropout).named_modules()
               if name.endswith("lora_dropout")]
    assert modules
    assert all(m.p == dropout if dropout else isinstance(m, nn.Identity) for m in modules)


def test_the_frozen_weights_are_bf16_and_the_adapters_fp32():
    params = dict(_tiny_with_lora().named_parameters())
    assert {str(p.dtype) for n, p in params.items() if "lora_" in n} == {"torch.float32"}
    assert {str(p.dtype) for n, p in params.items() if "lora_" not in n} == {"torch.bfloat16"}
