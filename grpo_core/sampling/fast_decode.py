"""A lean one-token decode step for Llama-family models (Llama, SmolLM2, Qwen2).

The sampler calls the model once per new token. Through `model(...)`, each call also pays for
Hugging Face's general machinery (output capturing, cache objects, mask dispatch): about a
third of a decode step on the tiny model. This step runs the same submodules (embedding,
rotary embedding, norms, projections, MLP, lm head) in the same order, with a plain list of
(keys, values) tensors as the cache. Anything else, or any model this module does not
recognise, takes the general path; a test checks both paths give the same logits.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

Tensor = torch.Tensor

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")


def supports(model) -> bool:
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa" or getattr(config, "use_sliding_window", False):
        return False
    if getattr(config, "pretraining_tp", 1) != 1:
        return False
    base = getattr(model, "model", None)
    return all(hasattr(base, name) for name in ("embed_tokens", "rotary_emb", "layers", "norm")) and hasattr(
        sys.modules[type(model).__module__], "apply_rotary_pos_emb"
    )


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
    hidden = base.embed_tokens(token_ids)  # (B, 1, H)
    cos, sin = base.rotary_emb(hidden, position_ids)
    B = hidden.shape[0]
    for layer, kv in zip(base.layers, cache):
        attn = layer.self_attn
        x = layer.input_layernorm(hidden)
        q = attn.q_proj(x).view(B, 1, -1, attn.head_dim).transpose(1, 2)  # (B, heads, 1, d)
        k = attn.k_proj(x).view(B, 1, -1, attn.head_dim).transpose(1, 2)  # (B, kv_heads, 1, d)
        v = attn.v_proj(x).view(B, 1, -1, attn.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, k, cos, sin)
        kv[0] = torch.cat([kv[0], k], dim=2)
        kv[1] = torch.cat([kv[1], v], dim=2)
        out = F.scaled_dot_product_attention(
            q, kv[0], kv[1], attn_mask=key_mask, scale=attn.scaling, enable_gqa=kv[0].shape[1] != q.shape[1]
        )  # (B, heads, 1, d)
        hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(B, 1, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return model.lm_head(base.norm(hidden))[:, -1, :]
