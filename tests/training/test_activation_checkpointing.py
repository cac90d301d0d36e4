"""Activation checkpointing (training/model.py): which decoder layers recompute their forward, and that
recomputing changes nothing a step computes, only when it computes it."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from transformers import AutoModelForCausalLM, Qwen2Config

from training.model import CausalLMWithLoss, apply_activation_checkpointing, builtin_config


def tiny(layers: int) -> CausalLMWithLoss:
    """The built-in tiny Qwen2 with `layers` decoder layers, the same seeded weights whatever the setting."""
    settings = builtin_config("tiny").to_dict() | {"num_hidden_layers": layers}
    settings.pop("layer_types", None)  # one per layer: rebuilt for the new count
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(Qwen2Config(**settings), dtype=torch.float32, attn_implementation="sdpa")
    return CausalLMWithLoss(lm, loss_chunk_tokens=16)


def recomputing(model: CausalLMWithLoss) -> list[int]:
    return [i for i, layer in enumerate(model.decoder_layers) if isinstance(layer, CheckpointWrapper)]


@pytest.mark.parametrize("layers,setting,expected", [
    (2, "selective", [1]),           # the built-in tiny model: its second layer
    (4, "selective", [1, 3]),        # every second layer, counted from the first: the 2nd and the 4th
    (5, "selective", [1, 3]),        # an odd count leaves the last layer's activations kept
    (28, "selective", [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27]),  # Qwen2.5-1.5B: 14 of 28
    (4, "full", [0, 1, 2, 3]),
    (4, "none", []),
])
def test_the_layers_that_recompute(layers, setting, expected):
    model = tiny(layers)
    apply_activation_checkpointing(model, setting)
    assert recomputing(model) == expected


def test_a_setting_left_to_auto_never_reaches_the_model():
    """auto is resolved before the model is built (planning.auto.resolve_auto, before the trainer starts); were it not, no layer would
    recompute and a run planned with recomputation would run out of memory: refused instead."""
    with pytest.raises(ValueError, match=r"^activation checkpointing 'auto': none, selective or full"):
        apply_activation_checkpointing(tiny(2), "auto")


def one_step(setting: str) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[str]]:
    """The loss, every parameter's gradient (by the unwrapped name) and the state dict's names of one
    forward and backward of two 32-token sequences through a 4-layer model."""
    model = tiny(4)
    apply_activation_checkpointing(model, setting)
    model.train()
    tokens = torch.randint(0, 512, (2, 33), generator=torch.Generator().manual_seed(1))
    loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    grads = {name.replace("._checkpoint_wrapped_module", ""): p.grad for name, p in model.named_parameters()}
    return loss.detach(), grads, list(model.state_dict())


def test_selective_and_full_recomputation_train_exactly_as_none_does():
    """Bitwise equal, not merely close: on CPU in fp32 the recomputed forward runs the same deterministic
    kernels on the same inputs (no dropout: Qwen2's attention dropout is 0), so backward reads the same
    activations, whether kept from the forward or computed again. The state dict keeps its names, so
    checkpoints and exports are the same whatever the setting."""
    loss, grads, names = one_step("none")
    assert all(g is not None and g.abs().sum() > 0 for g in grads.values())
    for setting in ("selective", "full"):
        other_loss, other_grads, other_names = one_step(setting)
        assert torch.equal(other_loss, loss), setting
        assert other_grads.keys() == grads.keys()
        assert all(torch.equal(other_grads[name], grads[name]) for name in grads), setting
        assert other_names == names
