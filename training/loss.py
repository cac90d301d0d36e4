"""Fused linear + cross-entropy: the LM-head loss without ever holding the whole batch's logits.

Qwen2.5's 151,936-token vocabulary makes the fp32 logits of one 8 x 4096 micro-batch 20 GB.
Here the tokens pass through the head in chunks, and for each chunk the forward pass computes
the summed loss and, at once, its gradients: d/dlogits = softmax - onehot, then
d/dhidden = dlogits @ W and d/dW += dlogits^T @ hidden. Backward only scales those by the
incoming gradient, so nothing is recomputed (a checkpointed loss would run the head's forward
matmul twice) and a chunk's logits die with the chunk. The softmax runs in fp32; the logits and
their gradient stay in the compute dtype (bf16 on GPU), as the matmuls that use them do.
"""

from __future__ import annotations

import torch


def softmax_xent_and_grad(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy of a [tokens, vocab] chunk, and d(sum)/d(logits) in the logits' dtype."""
    logits32 = logits.float()
    lse = torch.logsumexp(logits32, dim=-1)
    is_target = torch.arange(logits.shape[-1], device=logits.device) == labels[:, None]
    target_logit = torch.where(is_target, logits32, 0.0).sum(-1)
    probs = torch.exp(logits32 - lse[:, None])
    grad = torch.where(is_target, probs - 1.0, probs)
    return (lse - target_logit).sum(), grad.to(logits.dtype)


_compiled_kernels: dict = {}


def _xent_kernel(device: torch.device):
    """On GPU, compiled into two fused passes over the logits; eager elsewhere (no compiler needed)."""
    if device.type != "cuda":
        return softmax_xent_and_grad
    if "cuda" not in _compiled_kernels:
        _compiled_kernels["cuda"] = torch.compile(softmax_xent_and_grad, dynamic=False)
    return _compiled_kernels["cuda"]


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int):
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        # Accumulated in the weight's dtype; each addmm adds in fp32 inside the GEMM, rounding once per chunk.
        grad_weight = torch.zeros_like(weight) if want_weight else None
        loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
        xent = _xent_kernel(hidden.device)
        for start in range(0, hidden.shape[0], chunk_tokens):
            chunk = hidden[start:start + chunk_tokens]
            chunk_loss, grad_logits = xent(chunk @ weight.t(), labels[start:start + chunk_tokens])
            loss_sum += chunk_loss
            if want_hidden:
                torch.mm(grad_logits, weight, out=grad_hidden[start:start + chunk_tokens])
            if want_weight:
                grad_weight.addmm_(grad_logits.t(), chunk)
        ctx.save_for_backward(grad_hidden, grad_weight)
        return loss_sum

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_loss.to(grad_hidden.dtype if grad_hidden is not None else grad_weight.dtype)
        return (
            grad_hidden * scale if grad_hidden is not None else None,
            grad_weight * scale if grad_weight is not None else None,
            None,
            None,
        )


def linear_cross_entropy_sum(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                             chunk_tokens: int) -> torch.Tensor:
    """Sum over tokens of cross_entropy(hidden @ weight.T, labels), hidden [T, H], weight [V, H], labels [T]."""
    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], chunk_tokens):
            logits = hidden[start:start + chunk_tokens] @ weight.t()
            total = total + softmax_xent_and_grad(logits, labels[start:start + chunk_tokens])[0]
        return total
    return _FusedLinearCrossEntropy.apply(hidden, weight, labels, chunk_tokens)
