"""The fused head + cross-entropy against a float64 reference (on the GPU too, where there is one)."""

import pytest
import torch
import torch.nn.functional as F

from training.loss import linear_cross_entropy_sum, softmax_xent_and_grad

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return ((value.double() - reference).norm() / reference.norm()).item()


def reference(hidden, weight, labels):
    h = hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    loss = F.cross_entropy(h @ w.T, labels, reduction="mean")
    loss.backward()
    return loss.detach(), h.grad, w.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_fused_loss_and_gradients_match_float64(device, dtype, tolerance):
    torch.manual_seed(1)
    tokens, hidden_size, vocab = (4100, 256, 32000) if device == "cuda" else (37, 16, 50)
    hidden = torch.randn(tokens, hidden_size, device=device, dtype=dtype, requires_grad=True)
    weight = (torch.randn(vocab, hidden_size, device=device) / hidden_size**0.5).to(dtype).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), device=device)
    loss = linear_cross_entropy_sum(hidden, weight, labels, chunk_tokens=1024 if device == "cuda" else 8) / tokens
    loss.backward()
    ref_loss, ref_hidden_grad, ref_weight_grad = reference(hidden, weight, labels)
    assert abs(loss.item() - ref_loss.item()) / ref_loss.item() < tolerance / 10
    assert relative_error(hidden.grad, ref_hidden_grad) < tolerance
    assert relative_error(weight.grad, ref_weight_grad) < tolerance


def test_chunk_size_does_not_change_the_result():
    torch.manual_seed(2)
    hidden, weight = torch.randn(30, 8, requires_grad=True), torch.randn(20, 8, requires_grad=True)
    labels = torch.randint(0, 20, (30,))
    results = []
    for chunk in (1, 7, 30, 64):
        hidden.grad = weight.grad = None
        loss = linear_cross_entropy_sum(hidden, weight, labels, chunk)
        loss.backward()
        results.append((loss.detach(), hidden.grad.clone(), weight.grad.clone()))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a, b)


def test_no_grad_gives_the_same_loss():
    torch.manual_seed(3)
    hidden, weight, labels = torch.randn(12, 4), torch.randn(9, 4), torch.randint(0, 9, (12,))
    with torch.no_grad():
        loss = linear_cross_entropy_sum(hidden, weight, labels, 5)
    torch.testing.assert_close(loss, F.cross_entropy(hidden @ weight.T, labels, reduction="sum"))


def test_gradient_of_the_logits_is_softmax_minus_onehot():
    logits, labels = torch.randn(3, 5), torch.tensor([0, 4, 2])
    loss, grad = softmax_xent_and_grad(logits, labels)
    expected = torch.softmax(logits, -1) - F.one_hot(labels, 5)
    torch.testing.assert_close(grad, expected)
    torch.testing.assert_close(loss, F.cross_entropy(logits, labels, reduction="sum"))
