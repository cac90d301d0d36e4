"""Fused linear + cross-entropy: the LM-head loss without ever holding the whole batch's logits.

Qwen2.5's 151,936-token vocabulary makes the fp32 logits of one 8 x 4096 micro-batch 20 GB.
Here the tokens pass through the head in chunks, and for each chunk the forward pass computes
the summed loss and, at once, its gradients: d/dlogits = softmax - onehot, then
d/dhidden = dlogits @ W and d/dW += dlogits^T @ hidden. Backward only scales those by the
incoming gradient, so nothing is recomputed (a checkpointed loss would run the head's forward
matmul twice) and a chunk's logits die with the chunk.

Precision: the softmax and the loss scale run in fp32, and the scaled d/dlogits is rounded to
the compute dtype once; the head's weight gradient is summed over chunks in fp32 (it reaches the
weight's dtype once, at the end). Targets equal to IGNORE_INDEX (prompt tokens, padding, a
document's first token) add nothing to the loss and get no gradient.
"""

from __future__ import annotations

import torch

# Hugging Face's and PyTorch's convention for "no target here".
IGNORE_INDEX = -100


def softmax_xent_and_grad(logits: torch.Tensor, labels: torch.Tensor,
                          scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy of a [tokens, vocab] chunk over its valid targets, and
    scale * d(sum)/d(logits) in the logits' dtype (zero on ignored rows)."""
    logits32 = logits.float()
    valid = labels != IGNORE_INDEX
    lse = torch.logsumexp(logits32, dim=-1)
    is_target = torch.arange(logits.shape[-1], device=logits.device) == labels[:, None]
    target_logit = torch.where(is_target, logits32, 0.0).sum(-1)
    probs = torch.exp(logits32 - lse[:, None])
    grad = torch.where(is_target, probs - 1.0, probs) * torch.where(valid, scale, 0.0)[:, None]
    return torch.where(valid, lse - target_logit, 0.0).sum(), grad.to(logits.dtype)


_compiled_kernels: dict = {}


def _xent_kernel(device: torch.device):
    """On GPU, compiled into two fused passes over the logits; eager elsewhere (no compiler needed)."""
    if device.type != "cuda":
        return softmax_xent_and_grad
    if "cuda" not in _compiled_kernels:
        _compiled_kernels["cuda"] = torch.compile(softmax_xent_and_grad, dynamic=False)
    return _compiled_kernels["cuda"]


_FP32_OUT_GEMM: dict = {}


def _add_outer_fp32(accumulator: torch.Tensor, grad_logits: torch.Tensor, chunk: torch.Tensor) -> None:
    """accumulator (fp32) += grad_logits^T @ chunk, without rounding the running sum to bf16."""
    if grad_logits.dtype == torch.float32:
        accumulator.addmm_(grad_logits.t(), chunk)
    elif accumulator.is_cuda and _FP32_OUT_GEMM.get("cuda", True):
        # cuBLAS accumulates in fp32 and adds into the fp32 accumulator in place (beta = 1, out = self):
        # the chunk's product is never rounded, and the 0.9 GB accumulator is not copied twice per chunk.
        try:
            torch.addmm(accumulator, grad_logits.t(), chunk, out_dtype=torch.float32, out=accumulator)
            return
        except (RuntimeError, TypeError):  # a torch without addmm(out_dtype=) on this GPU
            _FP32_OUT_GEMM["cuda"] = False
        accumulator.add_((grad_logits.t() @ chunk).float())
    else:
        # One rounding of each chunk's product; the running sum stays fp32.
        accumulator.add_((grad_logits.t() @ chunk).float())


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, scale: torch.Tensor,
                chunk_tokens: int):
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None
        loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
        xent = _xent_kernel(hidden.device)
        for start in range(0, hidden.shape[0], chunk_tokens):
            chunk = hidden[start:start + chunk_tokens]
            chunk_loss, grad_logits = xent(chunk @ weight.t(), labels[start:start + chunk_tokens], scale)
            loss_sum += chunk_loss
            if want_hidden:
                torch.mm(grad_logits, weight, out=grad_hidden[start:start + chunk_tokens])
            if want_weight:
                _add_outer_fp32(grad_weight, grad_logits, chunk)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss_sum * scale

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        # The gradients were computed for the scaled loss; a caller's further factor applies in fp32.
        grad_hidden, grad_weight = ctx.saved_tensors
        grad_loss = grad_loss.float()
        if grad_hidden is not None:
            grad_hidden = (grad_hidden.float() * grad_loss).to(grad_hidden.dtype)
        if grad_weight is not None:
            grad_weight = (grad_weight * grad_loss).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int,
                         scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """scale * sum over valid targets of cross_entropy(hidden @ weight.T, labels), in fp32.

    hidden [T, H], weight [V, H], labels [T] (IGNORE_INDEX where there is no target). With
    scale = 1 / (valid targets of the whole step) the result is the step's mean loss share.
    """
    scale = torch.as_tensor(scale, dtype=torch.float32, device=hidden.device)
    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], chunk_tokens):
            logits = hidden[start:start + chunk_tokens] @ weight.t()
            total = total + softmax_xent_and_grad(logits, labels[start:start + chunk_tokens], scale)[0]
        return total * scale
    return _FusedLinearCrossEntropy.apply(hidden, weight, labels, scale, chunk_tokens)
