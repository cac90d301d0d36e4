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

Heads other than `hidden @ W` (LogitHead): a bias (Phi), a factor on the logits (Granite divides by
logits_scaling, Cohere multiplies by logit_scale) and a tanh soft cap (Gemma 2 and 3). They are applied
to each chunk's logits in fp32 and chained into d/dlogits before its one rounding; a plain head
(LogitHead()) runs exactly the code it ran before they existed.
"""

from __future__ import annotations

from typing import NamedTuple

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


class LogitHead(NamedTuple):
    """What a model's head does to `hidden @ W (+ bias)` before the softmax: logits x multiplier, then,
    with a soft cap c, c x tanh(logits / c). The bias is a tensor, passed beside the weight."""

    multiplier: float = 1.0
    softcap: float | None = None

    @property
    def plain(self) -> bool:
        return self.multiplier == 1.0 and self.softcap is None


def head_xent_and_grad(raw: torch.Tensor, labels: torch.Tensor, scale: torch.Tensor,
                       head: LogitHead) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax_xent_and_grad of the head's logits, its gradient taken back to the raw `hidden @ W (+ bias)`."""
    raw32 = raw.float()
    logits = raw32 * head.multiplier
    chain = head.multiplier
    if head.softcap is not None:
        capped = torch.tanh(logits / head.softcap)
        logits = capped * head.softcap
        chain = head.multiplier * (1.0 - capped * capped)  # d(c tanh(m x / c))/dx
    loss, grad = softmax_xent_and_grad(logits, labels, scale)
    return loss, (grad * chain).to(raw.dtype)


_compiled_kernels: dict = {}


def _xent_kernel(device: torch.device, head: LogitHead):
    """(raw logits, labels, scale) -> (summed loss, scaled gradient). On GPU, compiled into fused passes over
    the logits; eager elsewhere (no compiler needed). A plain head runs softmax_xent_and_grad alone."""
    if head.plain:
        kernel = softmax_xent_and_grad
    else:
        def kernel(raw, labels, scale):
            return head_xent_and_grad(raw, labels, scale, head)
    if device.type != "cuda":
        return kernel
    if head not in _compiled_kernels:
        _compiled_kernels[head] = torch.compile(kernel, dynamic=False)
    return _compiled_kernels[head]


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
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                scale: torch.Tensor, chunk_tokens: int, head: LogitHead):
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_bias = bias is not None and ctx.needs_input_grad[2]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if want_bias else None
        loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
        xent = _xent_kernel(hidden.device, head)
        for start in range(0, hidden.shape[0], chunk_tokens):
            chunk = hidden[start:start + chunk_tokens]
            raw = chunk @ weight.t() if bias is None else torch.addmm(bias, chunk, weight.t())
            chunk_loss, grad_logits = xent(raw, labels[start:start + chunk_tokens], scale)
            loss_sum += chunk_loss
            if want_hidden:
                torch.mm(grad_logits, weight, out=grad_hidden[start:start + chunk_tokens])
            if want_weight:
                _add_outer_fp32(grad_weight, grad_logits, chunk)
            if want_bias:
                grad_bias += grad_logits.float().sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.weight_dtype = weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        return loss_sum * scale

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        # The gradients were computed for the scaled loss; a caller's further factor applies in fp32.
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        grad_loss = grad_loss.float()
        if grad_hidden is not None:
            grad_hidden = (grad_hidden.float() * grad_loss).to(grad_hidden.dtype)
        if grad_weight is not None:
            grad_weight = (grad_weight * grad_loss).to(ctx.weight_dtype)
        if grad_bias is not None:
            grad_bias = (grad_bias * grad_loss).to(ctx.bias_dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int,
                         scale: torch.Tensor | float = 1.0, bias: torch.Tensor | None = None,
                         head: LogitHead = LogitHead()) -> torch.Tensor:
    """scale * sum over valid targets of cross_entropy(head(hidden @ weight.T + bias), labels), in fp32.

    hidden [T, H], weight [V, H], bias [V] or None, labels [T] (IGNORE_INDEX where there is no target).
    With scale = 1 / (valid targets of the whole step) the result is the step's mean loss share.
    """
    scale = torch.as_tensor(scale, dtype=torch.float32, device=hidden.device)
    trained = (hidden.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    if not torch.is_grad_enabled() or not trained:
        kernel = _xent_kernel(torch.device("cpu"), head)  # eager: evaluation needs no compiled gradient
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], chunk_tokens):
            chunk = hidden[start:start + chunk_tokens]
            raw = chunk @ weight.t() if bias is None else torch.addmm(bias, chunk, weight.t())
            total = total + kernel(raw, labels[start:start + chunk_tokens], scale)[0]
        return total * scale
    return _FusedLinearCrossEntropy.apply(hidden, weight, bias, labels, scale, chunk_tokens, head)
