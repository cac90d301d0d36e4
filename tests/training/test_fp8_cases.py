"""Cases of training/fp8.py that test_fp8.py holds on one side only: which modules is_fp8_linear picks by name and
type, the config each converted layer gets, and plain_tensors through every container a state dict holds."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from training.fp8 import convert_to_fp8, is_fp8_linear, plain_tensors

pytest.importorskip("torchao.float8")


@pytest.mark.parametrize("module, fqn, picked", [
    (nn.Linear(4, 4), "lm.model.layers.0.self_attn.q_proj", True),
    (nn.Linear(4, 4), "lm.model.layers.11.mlp.down_proj", True),
    (nn.Linear(4, 4), "lm.model.layers.0.self_attn.k_proj", False),  # k/v: too small for the casts to pay
    # A projection outside a numbered decoder layer (a vision tower's block, a pooler) keeps its precision.
    (nn.Linear(4, 4), "lm.visual.merger.mlp.up_proj", False),
    (nn.Linear(4, 4), "lm.model.layers.q_proj", False),
    # Only nn.Linear is swapped for Float8Linear: another module of the same name is not a linear layer.
    (nn.Embedding(4, 4), "lm.model.layers.0.self_attn.q_proj", False),
])
def test_only_the_chosen_linear_layers_of_numbered_decoder_layers_compute_in_float8(module, fqn, picked):
    assert is_fp8_linear(module, fqn) is picked


@pytest.mark.parametrize("emulate, all_gather", [(True, True), (True, False)])
def test_each_converted_layer_gets_the_emulation_and_all_gather_asked_for(emulate, all_gather):
    """On the CPU the tests convert with emulate=True (no FP8 hardware); a layer built without it would call the
    float8 GEMM that only FP8 tensor cores run."""
    from torchao.float8.float8_linear import Float8Linear

    model = nn.Module()
    model.layers = nn.ModuleList([nn.Module()])
    model.layers[0].up_proj = nn.Linear(16, 16)
    assert convert_to_fp8(model, all_gather_in_float8=all_gather, emulate=emulate) == ["layers.0.up_proj"]
    layer = model.layers[0].up_proj
    assert isinstance(layer, Float8Linear)
    assert (layer.config.emulate, layer.config.enable_fsdp_float8_all_gather) == (emulate, all_gather)


def test_plain_tensors_unwraps_float8_weights_in_dicts_lists_and_tuples_without_a_copy():
    from torchao.float8.float8_linear import LinearMMConfig
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    weights = [torch.randn(2, 2) for _ in range(3)]
    wrapped = [WeightWithDynamicFloat8CastTensor(w, LinearMMConfig(), torch.float8_e4m3fn) for w in weights]
    state = {"model": {"a": wrapped[0]}, "param_groups": [wrapped[1]], "pair": (wrapped[2], 5)}
    plain = plain_tensors(state)
    assert plain["model"]["a"] is weights[0] and plain["param_groups"][0] is weights[1]
    assert type(plain["pair"]) is tuple and plain["pair"][0] is weights[2] and plain["pair"][1] == 5
