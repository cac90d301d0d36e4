"""The fused head's bias gradient (Phi's lm_head carries one) against float64 autograd: under a caller's upstream
factor, and with the head's weight frozen (LoRA) while the bias trains."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from training.loss import IGNORE_INDEX, linear_cross_entropy


def problem(seed: int = 5, tokens: int = 30, hidden_size: int = 8, vocab: int = 20):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, hidden_size, generator=generator).requires_grad_()
    weight = (torch.randn(vocab, hidden_size, generator=generator) / hidden_size**0.5).requires_grad_()
    bias = torch.randn(vocab, generator=generator).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), generator=generator)
    labels[torch.rand(tokens, generator=generator) < 0.2] = IGNORE_INDEX
    return hidden, weight, bias, labels


def expected_grads(hidden, weight, bias, labels, upstream: float = 1.0):
    h, w, b = (t.detach().double().requires_grad_() for t in (hidden, weight, bias))
    (upstream * F.cross_entropy(h @ w.T + b, labels, ignore_index=IGNORE_INDEX)).backward()
    return h.grad, w.grad, b.grad


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return ((got.double() - want).norm() / want.norm()).item() < 1e-5


@pytest.mark.parametrize("upstream", [3.0, -0.5])
def test_the_bias_gradient_carries_the_callers_upstream_factor(upstream):
    hidden, weight, bias, labels = problem()
    scale = 1 / int((labels != IGNORE_INDEX).sum())
    (upstream * linear_cross_entropy(hidden, weight, labels, chunk_tokens=7, scale=scale, bias=bias)).backward()
    want = expected_grads(hidden, weight, bias, labels, upstream)
    assert all(close(g, w) for g, w in zip((hidden.grad, weight.grad, bias.grad), want))


@pytest.mark.parametrize("frozen", ["weight", "bias"])
def test_the_bias_trains_by_its_own_flag_not_the_weights(frozen):
    hidden, weight, bias, labels = problem(seed=6)
    (weight if frozen == "weight" else bias).requires_grad_(False)
    scale = 1 / int((labels != IGNORE_INDEX).sum())
    linear_cross_entropy(hidden, weight, labels, chunk_tokens=7, scale=scale, bias=bias).backward()
    _, want_weight, want_bias = expected_grads(hidden, weight, bias, labels)
    if frozen == "weight":
        assert weight.grad is None and bias.grad is not None and close(bias.grad, want_bias)
    else:
        assert bias.grad is None and close(weight.grad, want_weight)
