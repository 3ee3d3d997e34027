"""A lean one-token decode step for Llama-family models (Llama, SmolLM2, Qwen2) and Gemma 3.

The sampler takes it for a model it can walk; a LoRA-wrapped one decodes through HF (measured 3-5%
slower: docs/development/measurements.md).

The sampler calls the model once per new token. Through `model(...)`, each call also pays for
Hugging Face's general machinery (output capturing, cache objects, mask dispatch): about a
third of a decode step on the tiny model. This step runs the same submodules (embedding,
rotary embedding, norms, projections, MLP, lm head) in the same order, with a plain list of
(keys, values) tensors as the cache. Anything else, or any model this module does not
recognise, takes the general path; a test checks both paths give the same logits.

Gemma 3 differs from Llama in four places, each named below: a rotary embedding per layer type
(sliding or full attention), RMS norms on the queries and keys, norms after the attention and
around the MLP, and sliding-window layers. The sampler takes this path for Gemma only while the
sequence fits its window (generation.takes_bool_masks), where a sliding layer attends everything.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

Tensor = torch.Tensor

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "gemma3_text")


def supports(model) -> bool:
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa" or getattr(config, "use_sliding_window", False):
        return False
    if getattr(config, "pretraining_tp", 1) != 1:
        return False
    if is_gemma3(model) and (
        config.attn_logit_softcapping is not None
        or config.final_logit_softcapping is not None
        or getattr(config, "use_bidirectional_attention", False)
    ):
        return False
    base = getattr(model, "model", None)
    return all(hasattr(base, name) for name in ("embed_tokens", "rotary_emb", "layers", "norm")) and hasattr(
        sys.modules[type(model).__module__], "apply_rotary_pos_emb"
    )


def is_gemma3(model) -> bool:
    return getattr(model.config, "model_type", None) == "gemma3_text"


def layer_rotaries(model, hidden: Tensor, position_ids: Tensor) -> list[tuple[Tensor, Tensor]]:
    """(cos, sin) for each layer: one rotary embedding for all (Llama), or one per layer type
    (Gemma 3: base 10,000 on its sliding layers, 1,000,000 on its full ones)."""
    base = model.model
    if not is_gemma3(model):
        return [base.rotary_emb(hidden, position_ids)] * len(base.layers)
    types = model.config.layer_types
    by_type = {kind: base.rotary_emb(hidden, position_ids, kind) for kind in set(types)}
    return [by_type[kind] for kind in types]


def normed_qk(attn, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Gemma 3 normalises each head's queries and keys before the rotary embedding; Llama does not."""
    q_norm = getattr(attn, "q_norm", None)
    return (q, k) if q_norm is None else (q_norm(q), attn.k_norm(k))


def attention_residual(layer, hidden: Tensor, attended: Tensor) -> Tensor:
    """hidden + the attention block's output (Gemma 3 normalises that output first)."""
    norm = getattr(layer, "pre_feedforward_layernorm", None)  # present on Gemma 3's layers only
    return hidden + (attended if norm is None else layer.post_attention_layernorm(attended))


def mlp_residual(layer, hidden: Tensor, mlp) -> Tensor:
    """hidden + mlp(norm(hidden)): Llama's norm is post_attention_layernorm; Gemma 3 has a norm
    before the MLP and one after it."""
    norm = getattr(layer, "pre_feedforward_layernorm", None)
    if norm is None:
        return hidden + mlp(layer.post_attention_layernorm(hidden))
    return hidden + layer.post_feedforward_layernorm(mlp(norm(hidden)))


def cache_tensors(past) -> list[list[Tensor]] | None:
    """[[keys, values], …] per layer from a transformers DynamicCache, or None if its layout is unknown."""
    layers = getattr(past, "layers", None)
    if not layers or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        return None
    return [[layer.keys, layer.values] for layer in layers]


def decode_step(
    model,
    token_ids: Tensor,  # (B, 1)
    position_ids: Tensor,  # (B, 1)
    cache: list[list[Tensor]],  # per layer [keys, values], each (B, kv_heads, K, head_dim); extended in place
    key_mask: Tensor,  # (B, 1, 1, K + 1) bool: which keys (cached + this token) may be attended
) -> Tensor:
    """Logits (B, V) of the next token."""
    apply_rotary = sys.modules[type(model).__module__].apply_rotary_pos_emb
    base = model.model
    hidden = base.embed_tokens(token_ids)  # (B, 1, H); Gemma 3's embedding scales by √H itself
    rotaries = layer_rotaries(model, hidden, position_ids)
    B = hidden.shape[0]
    for layer, kv, (cos, sin) in zip(base.layers, cache, rotaries):
        attn = layer.self_attn
        x = layer.input_layernorm(hidden)
        q = attn.q_proj(x).view(B, 1, -1, attn.head_dim).transpose(1, 2)  # (B, heads, 1, d)
        k = attn.k_proj(x).view(B, 1, -1, attn.head_dim).transpose(1, 2)  # (B, kv_heads, 1, d)
        v = attn.v_proj(x).view(B, 1, -1, attn.head_dim).transpose(1, 2)
        q, k = apply_rotary(*normed_qk(attn, q, k), cos, sin)
        kv[0] = torch.cat([kv[0], k], dim=2)
        kv[1] = torch.cat([kv[1], v], dim=2)
        out = F.scaled_dot_product_attention(
            q, kv[0], kv[1], attn_mask=key_mask, scale=attn.scaling, enable_gqa=kv[0].shape[1] != q.shape[1]
        )  # (B, heads, 1, d)
        hidden = attention_residual(layer, hidden, attn.o_proj(out.transpose(1, 2).reshape(B, 1, -1)))
        hidden = mlp_residual(layer, hidden, layer.mlp)
    return model.lm_head(base.norm(hidden))[:, -1, :]
