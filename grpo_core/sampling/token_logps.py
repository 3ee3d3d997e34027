"""Per-token log-probs and entropies of softmax(logits / temperature), with their gradients, in two
forms: from logits already computed (`TokenLogps`), and from the decoder's hidden states through
the LM head in row chunks (`ChunkedHeadLogps`), for vocabularies whose logits would not fit whole.

Gemma 3's vocabulary has 262,144 tokens: a step of 32 completions of 192 tokens holds 32 × 192 ×
262,144 float32 logits, 6.4 GB, and its backward a gradient of the same size. Above LOGITS_BYTES the
LM head runs on CHUNK_BYTES of logits at a time: the forward keeps the hidden states and one
logsumexp per row, the backward computes each chunk's logits again (as Liger's fused linear
cross-entropy does), so the step holds a chunk's logits, not the batch's. Below it nothing changes
(SmolLM2's 49,152-token head at the suite's and the claims' sizes): the same operations, the same
bits. Both forms share the math below, row for row.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

LOGITS_BYTES = 2**30  # float32 logits above this are never materialized whole
CHUNK_BYTES = 2**28  # the float32 logits of one chunk of rows


def _upcast(x: Tensor) -> Tensor:  # bf16/fp16 logits -> float32; float32/float64 unchanged
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _scaled(logits: Tensor, temperature: float) -> Tensor:  # (N, V): z = logits / temperature, upcast
    z = _upcast(logits)
    return z / temperature if temperature != 1.0 else z


def _forward(z: Tensor, token_ids: Tensor, with_entropy: bool) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """(logsumexp (N,), log-probs of the tokens (N,), entropies (N,) or None) of rows z (N, V)."""
    lse = torch.logsumexp(z, dim=-1)  # (N,)
    logps = z.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1) - lse
    entropy = None
    if with_entropy:  # H = lse − Σ p·z, the sum as a batched dot product (no (N, V) product)
        p = torch.exp(z - lse.unsqueeze(-1))
        entropy = lse - torch.bmm(p.unsqueeze(1), z.unsqueeze(-1)).view(-1)
    return lse, logps, entropy


def _grad_z(
    z: Tensor,
    token_ids: Tensor,
    lse: Tensor,
    grad_logps: Optional[Tensor],
    grad_entropy: Optional[Tensor],
    temperature: float,
) -> Tensor:
    """∂loss/∂logits (N, V) of rows z: −softmax(z)·g plus g at the chosen tokens, and where the
    entropy has a gradient, −g_H·p·(z − Σ p·z); divided by the temperature."""
    grad = torch.exp(z - lse.unsqueeze(-1))  # softmax(z): the one (N, V) buffer
    if grad_logps is None:
        grad_logps = torch.zeros_like(lse)
    if grad_entropy is not None:  # + g_H·∂H/∂z = −g_H·p·(z − Σ p·z), before p is scaled below
        mean_z = torch.bmm(grad.unsqueeze(1), z.unsqueeze(-1)).view(-1)  # Σ p·z (N,)
        entropy_part = grad * (z - mean_z.unsqueeze(-1)) * (-grad_entropy.unsqueeze(-1))
    grad.mul_(-grad_logps.unsqueeze(-1))  # d(−lse)/dz = −softmax(z)
    grad.scatter_add_(-1, token_ids.unsqueeze(-1), grad_logps.unsqueeze(-1))  # d(z[token])/dz
    if grad_entropy is not None:
        grad.add_(entropy_part)
    if temperature != 1.0:
        grad.div_(temperature)
    return grad


class TokenLogps(torch.autograd.Function):
    """log softmax(z)[token] and the entropy of softmax(z), z = logits / temperature, without
    materializing the log-softmax: the forward keeps the logits and a logsumexp, the backward
    writes softmax(z)·(−g) into one buffer and adds g at the chosen tokens. The entropy has a
    gradient only where a loss uses it (entropy_coef): ∂H/∂z = −p·(z − Σ p·z), added in the same
    buffer; otherwise the backward is the log-probs' alone."""

    @staticmethod
    def forward(ctx, logits, token_ids, temperature, with_entropy):  # (N, V), (N,) -> (N,), (N,)
        lse, logps, entropy = _forward(_scaled(logits, temperature), token_ids, with_entropy)
        ctx.save_for_backward(logits, token_ids, lse)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)  # an unused output's gradient comes as None, not zeros
        if entropy is None:
            entropy = torch.zeros_like(lse)
            ctx.mark_non_differentiable(entropy)
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy):
        logits, token_ids, lse = ctx.saved_tensors
        t = ctx.temperature
        grad = _grad_z(_scaled(logits, t), token_ids, lse, grad_logps, grad_entropy, t)
        return grad.to(logits.dtype), None, None, None


def chunk_rows(vocab: int) -> int:
    """Rows of logits per chunk: CHUNK_BYTES of float32, at least one row."""
    return max(1, CHUNK_BYTES // (4 * vocab))


class ChunkedHeadLogps(torch.autograd.Function):
    """TokenLogps of the LM head's logits, hidden @ weightᵀ (+ bias), computed chunk_rows(V) rows at
    a time; the backward computes each chunk's logits again and gives the hidden states, and the
    head's weight and bias where they train (full fine-tuning; under LoRA the head is frozen),
    their gradients."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, token_ids, temperature, with_entropy):  # (N, H), (V, H), (V,)|None, (N,)
        step = chunk_rows(weight.shape[0])
        parts = []
        for start in range(0, hidden.shape[0], step):
            logits = torch.nn.functional.linear(hidden[start : start + step], weight, bias)
            parts.append(_forward(_scaled(logits, temperature), token_ids[start : start + step], with_entropy))
        lse = torch.cat([p[0] for p in parts])
        logps = torch.cat([p[1] for p in parts])
        entropy = torch.cat([p[2] for p in parts]) if with_entropy else torch.zeros_like(lse)
        ctx.save_for_backward(hidden, weight, bias, token_ids, lse)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy):
        hidden, weight, bias, token_ids, lse = ctx.saved_tensors
        t = ctx.temperature
        step = chunk_rows(weight.shape[0])
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        grad_bias = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[2] else None
        for start in range(0, hidden.shape[0], step):
            rows = slice(start, start + step)
            logits = torch.nn.functional.linear(hidden[rows], weight, bias)
            grad = _grad_z(
                _scaled(logits, t),
                token_ids[rows],
                lse[rows],
                None if grad_logps is None else grad_logps[rows],
                None if grad_entropy is None else grad_entropy[rows],
                t,
            ).to(logits.dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = grad @ weight
            if grad_weight is not None:
                grad_weight.addmm_(grad.t(), hidden[rows])
            if grad_bias is not None:
                grad_bias.add_(grad.sum(dim=0))
        return grad_hidden, grad_weight, grad_bias, None, None, None


def unwrapped(model):
    """The model's own class under a DDP wrapper (`.module`) and a PEFT wrapper (`get_base_model`),
    which pass **kwargs on to it."""
    inner = getattr(model, "module", model)
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def lm_head_of(model) -> Optional[torch.nn.Linear]:
    """The LM head of a causal LM (through DDP and PEFT wrappers) whose logits are its plain output
    (no final soft-capping), with the decoder beside it as `.model`; None otherwise."""
    inner = unwrapped(model)
    head, decoder = getattr(inner, "lm_head", None), getattr(inner, "model", None)
    if not isinstance(head, torch.nn.Linear) or decoder is None:
        return None
    if getattr(getattr(inner, "config", None), "final_logit_softcapping", None):
        return None
    return head


def decoder_of(model):
    """The decoder stack under a causal LM's head (`model.model`), through DDP and PEFT wrappers."""
    return unwrapped(model).model


def chunks_logits(model, rows: int) -> bool:
    """Whether `rows` rows of this model's logits exceed LOGITS_BYTES (then the head runs in chunks)."""
    head = lm_head_of(model)
    return head is not None and rows * head.weight.shape[0] * 4 > LOGITS_BYTES
