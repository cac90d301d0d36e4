"""The optimizer's groups (AdamW, decay on matrices only, frozen weights left out) and evaluation's mean over the
valid targets, on a stand-in model whose summed loss is known."""

import torch
from torch import nn

from training.loss import IGNORE_INDEX
from training.step import evaluate, make_optimizer


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)
        self.frozen = nn.Linear(3, 3)
        self.frozen.requires_grad_(False)


def test_decay_applies_to_matrices_only_and_frozen_weights_get_no_state():
    """torchtitan's and nanoGPT's AdamW: weight decay on 2-D weights, none on biases and norms; betas (0.9, 0.95),
    eps 1e-8. LoRA's frozen base weights are not in any group."""
    model = Tiny()
    optimizer = make_optimizer(model, lr=1e-3, weight_decay=0.1, device=torch.device("cpu"))
    decay, no_decay = optimizer.param_groups
    assert [p is model.proj.weight for p in decay["params"]] == [True] and decay["weight_decay"] == 0.1
    assert {id(p) for p in no_decay["params"]} == {id(model.proj.bias), id(model.norm.weight), id(model.norm.bias)}
    assert no_decay["weight_decay"] == 0.0
    assert isinstance(optimizer, torch.optim.AdamW) and decay["betas"] == (0.9, 0.95) and decay["eps"] == 1e-8


class SumOfTargets(nn.Module):
    """Stands in for CausalLMWithLoss: the summed loss of a batch is 2.0 per valid target."""

    def __init__(self):
        super().__init__()
        self.seen_training = []

    def forward(self, input_ids, labels, position_ids=None, scale=1.0):
        self.seen_training.append(self.training)
        return 2.0 * (labels != IGNORE_INDEX).sum().float()


def test_evaluation_is_the_mean_over_valid_targets_in_eval_mode():
    labels_a = torch.tensor([[5, IGNORE_INDEX, 7, 8]])  # 3 targets
    labels_b = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 9]])  # 1 target
    batches = [{"input_ids": torch.zeros_like(labels), "labels": labels} for labels in (labels_a, labels_b)]
    model = SumOfTargets()
    assert evaluate(model, batches, torch.device("cpu")) == (2.0, 4)  # (6 + 2) / 4 targets, not / 2 batches
    assert model.seen_training == [False, False] and model.training  # no dropout in validation; training mode after
