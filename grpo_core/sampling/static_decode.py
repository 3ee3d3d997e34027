"""Decoding with a preallocated (static) KV cache, so that the one-token step has fixed shapes and
can be captured once as a CUDA graph and replayed for every token.

The dynamic path (generation.py + fast_decode.py) grows each layer's keys and values with
`torch.cat` every token: new shapes every step, one kernel launch per op, and on a GPU the
step is bound by those launches (the H100 figure is in results/benchmarks/README.md).
Here each layer's cache is a buffer (B, kv_heads, P + T, d) allocated once; the step writes its
keys and values at a position held in a device tensor (`index_copy_`) and attends over the whole
buffer with a boolean key mask that opens one column per token. Same submodules, same order,
same arithmetic as fast_decode.decode_step, so the logits agree with a plain forward pass (a
test checks both on the CPU). LoRA adapters are folded into per-layer weight buffers for the
whole generation (`adapter_weights`), so decoding costs what the base model costs.
"""

from __future__ import annotations

import sys
from typing import Optional

import torch
import torch.nn.functional as F

from grpo_core.sampling import fast_decode

Tensor = torch.Tensor


def supports(model) -> bool:
    """The models fast_decode can walk (its module layout): Llama, Qwen2, Gemma 3."""
    return fast_decode.supports(model)


# ---- LoRA while sampling: the adapters folded into weight buffers ------------------------------------
def _lora_delta(module) -> Optional[Tensor]:
    """scale·B·A of a PEFT LoRA linear with its active adapters, or None for a plain linear."""
    lora_a, lora_b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
    if lora_a is None or getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
        return None
    delta = None
    for name in module.active_adapters:
        if name not in lora_a:
            continue
        d = (lora_b[name].weight @ lora_a[name].weight) * module.scaling[name]
        delta = d if delta is None else delta + d
    return delta


class AdapterWeights:
    """For each adapted linear layer, a buffer W + scale·B·A (the base weights are untouched, so
    nothing drifts through merge/unmerge rounding, and the KL reference — adapters off — still
    sees W). `refresh()` recomputes the buffers in place (same storage: CUDA graphs that read
    them stay valid); call it once per generation, after the optimizer step."""

    def __init__(self, model):
        self.modules = [m for m in model.modules() if _lora_delta(m) is not None]
        with torch.no_grad():
            self.buffers = {id(m): m.base_layer.weight.detach().clone() for m in self.modules}
        self.refresh()

    def refresh(self) -> None:
        with torch.no_grad():
            for m in self.modules:
                delta = _lora_delta(m)
                buffer = self.buffers[id(m)]
                buffer.copy_(m.base_layer.weight)
                if delta is not None:
                    buffer.add_(delta.to(buffer.dtype))

    def linear(self, module, x: Tensor) -> Tensor:
        """module(x), with the folded weight for an adapted layer (dropout is off while sampling)."""
        weight = self.buffers.get(id(module))
        if weight is None:
            return module(x)
        return F.linear(x, weight, module.base_layer.bias)


def _plain_linear(module, x: Tensor) -> Tensor:
    return module(x)


# ---- the static cache ---------------------------------------------------------------------------------
class StaticCache:
    """Per layer, keys and values (B, kv_heads, capacity, d), filled from position 0; `key_mask`
    (B, 1, 1, capacity) marks the positions a query may attend (prompt tokens, then one more per
    decoded token)."""

    def __init__(self, model, batch: int, capacity: int, dtype: torch.dtype, device: torch.device):
        config = model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (batch, heads, capacity, head_dim)
        self.layers = [
            [torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)]
            for _ in range(config.num_hidden_layers)
        ]
        self.key_mask = torch.zeros(batch, 1, 1, capacity, dtype=torch.bool, device=device)
        self.capacity = capacity

    def fill(self, past, prompt_mask: Tensor) -> None:  # past: per layer (B, kv_heads, P, d)
        """Copy the prefilled prompt keys and values in, and open the prompt's valid positions."""
        P = prompt_mask.shape[1]
        for (keys, values), layer in zip(fast_decode.cache_tensors(past), self.layers):
            layer[0][:, :, :P].copy_(keys)
            layer[1][:, :, :P].copy_(values)
        self.key_mask.zero_()
        self.key_mask[:, 0, 0, :P] = prompt_mask.bool()


def static_decode_step(
    model,
    cache: StaticCache,
    token_ids: Tensor,  # (B, 1)
    position_ids: Tensor,  # (B, 1)
    write_index: Tensor,  # (1,) long, on the device: where this token's keys and values go
    linear=_plain_linear,  # AdapterWeights.linear while sampling with LoRA
) -> Tensor:
    """Logits (B, V) of the next token; writes this token's keys and values at write_index and
    opens that position in the key mask. Every shape is fixed, so the step can be graph-captured."""
    apply_rotary = sys.modules[type(model).__module__].apply_rotary_pos_emb
    base = model.model
    hidden = base.embed_tokens(token_ids)  # (B, 1, H)
    rotaries = fast_decode.layer_rotaries(model, hidden, position_ids)
    B = hidden.shape[0]
    cache.key_mask.index_fill_(3, write_index, True)
    for layer, kv, (cos, sin) in zip(base.layers, cache.layers, rotaries):
        attn = layer.self_attn
        x = layer.input_layernorm(hidden)
        q = linear(attn.q_proj, x).view(B, 1, -1, attn.head_dim).transpose(1, 2)  # (B, heads, 1, d)
        k = linear(attn.k_proj, x).view(B, 1, -1, attn.head_dim).transpose(1, 2)  # (B, kv_heads, 1, d)
        v = linear(attn.v_proj, x).view(B, 1, -1, attn.head_dim).transpose(1, 2)
        q, k = apply_rotary(*fast_decode.normed_qk(attn, q, k), cos, sin)
        kv[0].index_copy_(2, write_index, k.to(kv[0].dtype))
        kv[1].index_copy_(2, write_index, v.to(kv[1].dtype))
        out = F.scaled_dot_product_attention(
            q, kv[0], kv[1], attn_mask=cache.key_mask, scale=attn.scaling, enable_gqa=kv[0].shape[1] != q.shape[1]
        )  # (B, heads, 1, d)
        hidden = fast_decode.attention_residual(
            layer, hidden, linear(attn.o_proj, out.transpose(1, 2).reshape(B, 1, -1))
        )
        hidden = fast_decode.mlp_residual(
            layer,
            hidden,
            lambda x, mlp=layer.mlp: linear(
                mlp.down_proj, mlp.act_fn(linear(mlp.gate_proj, x)) * linear(mlp.up_proj, x)
            ),
        )
    return linear(model.lm_head, base.norm(hidden))[:, -1, :]


class GraphedStep:
    """static_decode_step captured as a CUDA graph: the inputs are copied into static buffers and
    the graph is replayed (one launch instead of several hundred per token). CUDA only."""

    def __init__(self, model, cache: StaticCache, batch: int, device, linear=_plain_linear):
        self.tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.index = torch.zeros(1, dtype=torch.long, device=device)
        saved_mask = cache.key_mask.clone()
        saved = [[k.clone(), v.clone()] for k, v in cache.layers]
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):  # warm-up runs on a side stream before capture, as torch requires
            for _ in range(2):
                static_decode_step(model, cache, self.tokens, self.positions, self.index, linear)
        torch.cuda.current_stream(device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = static_decode_step(model, cache, self.tokens, self.positions, self.index, linear)
        cache.key_mask.copy_(saved_mask)  # the warm-up and capture wrote position 0: undo
        for (k, v), (sk, sv) in zip(cache.layers, saved):
            k.copy_(sk)
            v.copy_(sv)

    def __call__(self, token_ids: Tensor, position_ids: Tensor, write_index: Tensor) -> Tensor:
        self.tokens.copy_(token_ids)
        self.positions.copy_(position_ids)
        self.index.copy_(write_index)
        self.graph.replay()
        return self.logits


class StaticDecoder:
    """What the sampler needs to decode with a static cache: the cache and, on CUDA with
    `use_graph`, the captured step, both kept across generations while the batch size and the
    capacity (prompt length rounded up to `bucket`, plus max_new_tokens) stay the same."""

    def __init__(self, model, use_graph: bool = False, adapters: Optional[AdapterWeights] = None, bucket: int = 64):
        self.model = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.use_graph, self.adapters, self.bucket = use_graph, adapters, bucket
        self.linear = adapters.linear if adapters is not None else _plain_linear
        self._key, self._cache, self._graph = None, None, None

    def start(self, past, prompt_mask: Tensor, max_new_tokens: int):
        """Load the prefilled prompt; returns step(token_ids (B,1), position_ids (B,1), write_index (1,)) -> logits."""
        B, P = prompt_mask.shape
        capacity = -(-P // self.bucket) * self.bucket + max_new_tokens
        dtype = fast_decode.cache_tensors(past)[0][0].dtype
        key = (B, capacity, dtype, prompt_mask.device)
        if key != self._key:
            self._key, self._graph = key, None
            self._cache = StaticCache(self.model, B, capacity, dtype, prompt_mask.device)
        self._cache.fill(past, prompt_mask)
        if self.adapters is not None:
            self.adapters.refresh()
        if not self.use_graph:
            return lambda tokens, positions, index: static_decode_step(
                self.model, self._cache, tokens, positions, index, self.linear
            )
        if self._graph is None:
            self._graph = GraphedStep(self.model, self._cache, B, prompt_mask.device, self.linear)
        return self._graph
