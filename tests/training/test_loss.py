"""The fused head + cross-entropy against a float64 reference (on the GPU too, where there is one)."""

import pytest
import torch
import torch.nn.functional as F

from training.loss import IGNORE_INDEX, LogitHead, linear_cross_entropy, softmax_xent_and_grad

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    return ((value.double() - reference).norm() / reference.norm()).item()


def bias(value: torch.Tensor, reference: torch.Tensor) -> float:
    """The systematic part of an error: how far value's projection on the reference is from 1.
    Random per-element rounding averages out here; a wrong overall scale does not."""
    v, r = value.double().flatten(), reference.flatten()
    return (v @ r / (r @ r)).item() - 1


def reference(hidden, weight, labels, denominator=None):
    """float64 cross-entropy summed over valid targets / denominator (default: their count)."""
    h = hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    total = F.cross_entropy(h @ w.T, labels, reduction="sum", ignore_index=IGNORE_INDEX)
    loss = total / (denominator or int((labels != IGNORE_INDEX).sum()))
    loss.backward()
    return loss.detach(), h.grad, w.grad


def problem(seed, tokens, hidden_size, vocab, device="cpu", dtype=torch.float32, masked=0.0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, hidden_size, generator=generator).to(device, dtype).requires_grad_()
    weight = (torch.randn(vocab, hidden_size, generator=generator) / hidden_size**0.5).to(device, dtype).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), generator=generator)
    labels[torch.rand(tokens, generator=generator) < masked] = IGNORE_INDEX
    return hidden, weight, labels.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_fused_loss_and_gradients_match_float64(device, dtype, tolerance):
    tokens, hidden_size, vocab = (4100, 256, 32000) if device == "cuda" else (37, 16, 50)
    hidden, weight, labels = problem(1, tokens, hidden_size, vocab, device, dtype)
    loss = linear_cross_entropy(hidden, weight, labels, chunk_tokens=1024 if device == "cuda" else 8, scale=1 / tokens)
    loss.backward()
    ref_loss, ref_hidden_grad, ref_weight_grad = reference(hidden, weight, labels)
    assert abs(loss.item() - ref_loss.item()) / ref_loss.item() < tolerance / 10
    assert relative_error(hidden.grad, ref_hidden_grad) < tolerance
    assert relative_error(weight.grad, ref_weight_grad) < tolerance


def test_ignored_targets_add_no_loss_and_get_no_gradient():
    hidden, weight, labels = problem(2, 40, 16, 50, masked=0.4)
    valid = int((labels != IGNORE_INDEX).sum())
    assert 10 < valid < 35  # the case has both kinds of rows
    loss = linear_cross_entropy(hidden, weight, labels, chunk_tokens=7, scale=1 / valid)
    loss.backward()
    ref_loss, ref_hidden_grad, ref_weight_grad = reference(hidden, weight, labels)
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert relative_error(hidden.grad, ref_hidden_grad) < 1e-6
    assert relative_error(weight.grad, ref_weight_grad) < 1e-6
    assert hidden.grad[labels == IGNORE_INDEX].abs().max() == 0


def test_micro_batches_normalised_by_the_global_count_of_valid_targets():
    """Accumulation: each micro-batch scaled by 1/(all valid targets of the step) sums to the
    step's token mean, not the mean of per-micro-batch means (they differ when masks differ)."""
    hidden, weight, labels = problem(3, 60, 16, 50, masked=0.3)
    labels[:20][torch.arange(20) % 4 != 0] = IGNORE_INDEX  # the first micro-batch is mostly prompt
    valid = int((labels != IGNORE_INDEX).sum())
    total = sum(linear_cross_entropy(hidden[i:i + 20], weight, labels[i:i + 20], chunk_tokens=6, scale=1 / valid)
                for i in (0, 20, 40))
    total.backward()
    ref_loss, ref_hidden_grad, ref_weight_grad = reference(hidden, weight, labels)
    assert total.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert relative_error(hidden.grad, ref_hidden_grad) < 1e-6
    assert relative_error(weight.grad, ref_weight_grad) < 1e-6
    mean_of_means = sum(reference(hidden[i:i + 20], weight, labels[i:i + 20])[0] for i in (0, 20, 40)) / 3
    assert abs(mean_of_means.item() - ref_loss.item()) > 0.01  # the case tells the two apart


def test_the_loss_scale_is_not_rounded_to_bf16():
    """1/3 in bf16 is 0.33398 (+0.2%): a scale rounded before use biases every gradient by that much."""
    hidden, weight, labels = problem(4, 48, 32, 64, dtype=torch.bfloat16)
    loss = linear_cross_entropy(hidden, weight, labels, chunk_tokens=16, scale=1 / 3)
    loss.backward()
    _, ref_hidden_grad, ref_weight_grad = reference(hidden, weight, labels, denominator=3)
    assert abs(bias(hidden.grad, ref_hidden_grad)) < 5e-4
    assert abs(bias(weight.grad, ref_weight_grad)) < 5e-4
    assert loss.item() == pytest.approx(reference(hidden, weight, labels, denominator=3)[0].item(), rel=5e-3)


def test_the_head_weight_gradient_is_summed_over_chunks_in_fp32():
    """With many chunks, a bf16 running sum loses the small late additions; an fp32 one does not."""
    hidden, weight, labels = problem(5, 4096, 16, 32, dtype=torch.bfloat16)
    linear_cross_entropy(hidden, weight, labels, chunk_tokens=16, scale=1 / 4096).backward()
    _, _, ref_weight_grad = reference(hidden, weight, labels)
    assert relative_error(weight.grad, ref_weight_grad) < 4e-3


def test_chunk_size_does_not_change_the_result():
    hidden, weight, labels = problem(6, 30, 8, 20, masked=0.2)
    results = []
    for chunk in (1, 7, 30, 64):
        hidden.grad = weight.grad = None
        loss = linear_cross_entropy(hidden, weight, labels, chunk, scale=0.1)
        loss.backward()
        results.append((loss.detach(), hidden.grad.clone(), weight.grad.clone()))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a, b)


def test_no_grad_gives_the_same_loss():
    hidden, weight, labels = problem(7, 12, 4, 9, masked=0.3)
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, labels, 5, scale=0.5)
    expected = F.cross_entropy(hidden @ weight.T, labels, reduction="sum", ignore_index=IGNORE_INDEX) * 0.5
    torch.testing.assert_close(loss, expected)


def test_gradient_of_the_logits_is_scaled_softmax_minus_onehot_and_zero_where_ignored():
    logits, labels = torch.randn(3, 5), torch.tensor([0, IGNORE_INDEX, 2])
    loss, grad = softmax_xent_and_grad(logits, labels, torch.tensor(0.25))
    expected = (torch.softmax(logits, -1) - F.one_hot(labels.clamp(min=0), 5)) * 0.25
    expected[1] = 0
    torch.testing.assert_close(grad, expected)
    torch.testing.assert_close(loss, F.cross_entropy(logits, labels, reduction="sum", ignore_index=IGNORE_INDEX))


@pytest.mark.parametrize("upstream", [3.0, -0.5])
def test_backward_applies_an_upstream_gradient_other_than_one(upstream):
    """A caller that scales the loss (a sum over micro-batches weighted by 3, a sign flip) gets gradients
    scaled the same: d(upstream * loss)/d(hidden, weight), against float64 autograd of upstream * loss."""
    hidden, weight, labels = problem(seed=4, tokens=48, hidden_size=16, vocab=40, masked=0.25)
    (upstream * linear_cross_entropy(hidden, weight, labels, chunk_tokens=16,
                                     scale=1 / int((labels != IGNORE_INDEX).sum()))).backward()
    h = hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    (upstream * F.cross_entropy(h @ w.T, labels, ignore_index=IGNORE_INDEX)).backward()
    assert relative_error(hidden.grad, h.grad) < 1e-5
    assert relative_error(weight.grad, w.grad) < 1e-5


@pytest.mark.parametrize("frozen", ["weight", "hidden"])
def test_a_frozen_input_gets_no_gradient_and_no_gradient_buffer(frozen):
    """LoRA freezes the LM head: the hidden states still get their gradient through the fused function, and no
    [vocab, hidden] fp32 buffer is kept for the head (0.9 GB for Qwen2.5-1.5B's 151,936 x 1,536)."""
    hidden, weight, labels = problem(8, 24, 8, 30, masked=0.2)
    (weight if frozen == "weight" else hidden).requires_grad_(False)
    loss = linear_cross_entropy(hidden, weight, labels, chunk_tokens=7, scale=1 / int((labels != IGNORE_INDEX).sum()))
    assert type(loss.grad_fn).__name__ == "_FusedLinearCrossEntropyBackward"
    saved_hidden, saved_weight, _ = loss.grad_fn.saved_tensors
    assert (saved_weight is None) == (frozen == "weight") and (saved_hidden is None) == (frozen == "hidden")
    loss.backward()
    _, ref_hidden_grad, ref_weight_grad = reference(hidden, weight, labels)
    trained, reference_grad = (hidden, ref_hidden_grad) if frozen == "weight" else (weight, ref_weight_grad)
    assert relative_error(trained.grad, reference_grad) < 1e-6
    assert (weight if frozen == "weight" else hidden).grad is None


def test_without_a_scale_the_loss_is_the_plain_sum():
    hidden, weight, labels = problem(9, 10, 4, 7, masked=0.3)
    with torch.no_grad():
        expected = F.cross_entropy(hidden @ weight.T, labels, reduction="sum", ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(linear_cross_entropy(hidden, weight, labels, 4), expected)


def test_evaluation_builds_no_gradients(monkeypatch):
    """Under no_grad (validation) the eager path runs: the fused function would compute every gradient for nothing."""
    from training import loss as loss_module

    def must_not_run(*args):
        raise AssertionError("the gradient-computing function ran under no_grad")

    monkeypatch.setattr(loss_module._FusedLinearCrossEntropy, "apply", must_not_run)
    hidden, weight, labels = problem(10, 12, 4, 9)
    with torch.no_grad():
        linear_cross_entropy(hidden, weight, labels, 5)


@pytest.mark.filterwarnings("error")
def test_each_chunks_hidden_gradient_is_written_in_place():
    """Into its own rows of the buffer: an output of the wrong shape is resized with a warning (an error in later torch)."""
    hidden, weight, labels = problem(11, 37, 16, 50)
    linear_cross_entropy(hidden, weight, labels, chunk_tokens=8, scale=1 / 37).backward()
    _, ref_hidden_grad, _ = reference(hidden, weight, labels)
    assert relative_error(hidden.grad, ref_hidden_grad) < 1e-5


@pytest.mark.parametrize("head", [LogitHead(multiplier=0.25), LogitHead(softcap=3.0), LogitHead(multiplier=4.0, softcap=2.0)],
                         ids=["scaled", "soft-capped", "both"])
def test_a_transformed_head_with_a_bias_matches_float64_autograd(head):
    """Against autograd through the head as transformers writes it (Gemma 2: logits / c, tanh, x c), with a
    bias (Phi), over several chunks: loss and the hidden, weight and bias gradients."""
    hidden, weight, labels = problem(12, 30, 8, 20, masked=0.2)
    hidden.data *= 4  # logits of several units, where the cap bends them
    bias_ = torch.randn(20, generator=torch.Generator().manual_seed(3)).requires_grad_()
    valid = int((labels != IGNORE_INDEX).sum())
    loss = linear_cross_entropy(hidden, weight, labels, chunk_tokens=7, scale=1 / valid, bias=bias_, head=head)
    loss.backward()
    h, w, b = (t.detach().double().requires_grad_() for t in (hidden, weight, bias_))
    logits = (h @ w.T + b) * head.multiplier
    if head.softcap is not None:
        logits = torch.tanh(logits / head.softcap) * head.softcap
    expected = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)
    expected.backward()
    assert abs(loss.item() - expected.item()) < 1e-5
    for got, want in ((hidden.grad, h.grad), (weight.grad, w.grad), (bias_.grad, b.grad)):
        assert relative_error(got, want) < 1e-5


def test_a_transformed_head_under_no_grad_gives_the_same_loss():
    hidden, weight, labels = problem(13, 12, 4, 9, masked=0.3)
    head = LogitHead(multiplier=2.0, softcap=1.5)
    graded = linear_cross_entropy(hidden, weight, labels, 5, head=head)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(hidden, weight, labels, 5, head=head), graded.detach())


def test_a_plain_head_runs_the_plain_kernel_alone():
    """Qwen2 and the other plain heads pay nothing for the head variants: their chunks go straight to
    softmax_xent_and_grad, with no scaling, capping or extra fp32 pass over the logits."""
    from training.loss import _xent_kernel

    assert _xent_kernel(torch.device("cpu"), LogitHead()) is softmax_xent_and_grad
    assert _xent_kernel(torch.device("cpu"), LogitHead(multiplier=2.0)) is not softmax_xent_and_grad


def test_evaluation_adds_the_head_s_bias_like_transformers():
    """Validation runs under no_grad: Phi's LM head has a bias, which the evaluated loss must add as
    nn.Linear does (reference: cross_entropy over hidden @ W.T + b in float64)."""
    hidden, weight, labels = problem(14, 12, 8, 10, masked=0.25)
    bias_ = 3 * torch.randn(10, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, labels, chunk_tokens=5, bias=bias_)
    expected = F.cross_entropy(hidden.double() @ weight.double().T + bias_.double(), labels,
                               ignore_index=IGNORE_INDEX, reduction="sum")
    assert abs(loss.item() - expected.item()) < 1e-4 * abs(expected.item())
