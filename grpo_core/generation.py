"""Sampling G completions per prompt with a KV cache, and per-token log-probs of completions.

Prompts are left-padded; position ids come from the attention mask so padded and unpadded rows
see the same positions. Completion tokens run through the first EOS (included in the mask);
what follows is padding with mask 0.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def positions_from_mask(attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, L)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def filter_logits(
    logits: Tensor,  # (B, V) already divided by the temperature
    top_k: int,  # 0 = off
    top_p: float,  # 1 = off
) -> Tensor:
    """Set to -inf the tokens outside the top-k, then outside the smallest nucleus of mass top_p:
    transformers' TopKLogitsWarper and TopPLogitsWarper, in the order `generate` applies them."""
    if top_k > 0 and top_k < logits.shape[-1]:
        from transformers.generation.logits_process import TopKLogitsWarper

        logits = TopKLogitsWarper(top_k)(None, logits)
    if top_p < 1.0:
        from transformers.generation.logits_process import TopPLogitsWarper

        logits = TopPLogitsWarper(top_p)(None, logits)
    return logits


def takes_bool_masks(model) -> bool:
    """True for SDPA attention without a sliding window: HF then passes a 4D boolean mask
    (True = may attend) straight to SDPA, so this module can build it."""
    config = getattr(getattr(model, "module", model), "config", None)  # through a DDP wrapper (data parallel)
    return (getattr(config, "_attn_implementation", None) == "sdpa"
            and not getattr(config, "use_sliding_window", False))


def causal_bool_mask(attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, 1, L, L)
    """Causal attention over the valid keys; every query also sees itself (no all-masked row)."""
    L = attention_mask.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=attention_mask.device).tril_()
    return ((causal[None] & attention_mask.bool()[:, None, :]) | torch.eye(L, dtype=torch.bool,
                                                                            device=attention_mask.device))[:, None]


def sample_categorical(logits: Tensor, generator: torch.Generator | None) -> Tensor:  # (B, V) -> (B,)
    """One draw per row from softmax(logits) by inverting the CDF with one uniform per row.
    Same distribution as torch.multinomial(softmax(logits), 1), which draws an exponential
    variate for every vocabulary entry: 14 ms per call at vocabulary 49152 on a 2-core CPU."""
    weights = (logits - logits.max(dim=-1, keepdim=True).values).exp_()  # unnormalized; -inf -> 0
    cdf = weights.cumsum_(dim=-1)  # (B, V), in place
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    # the first index with cdf > u; a token of weight 0 never is (its cdf equals its predecessor's)
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


def sample_completions(
    model,
    prompt_ids: Tensor,  # (B, P) left-padded
    prompt_mask: Tensor,  # (B, P)
    *,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float,
    top_p: float,
    top_k: int,
    generator: torch.Generator | None,
    greedy: bool = False,
    group_size: int = 1,
    decoder=None,
    check_every: int = 1,
) -> tuple[Tensor, Tensor]:
    """Returns completion_ids (B, T) and completion_mask (B, T), T ≤ max_new_tokens; stops as
    soon as every row has produced EOS. With group_size G > 1 and rows in groups of G equal
    prompts (checked), each prompt is prefilled once and its KV cache repeated G times.
    `decoder`: a static_decode.StaticDecoder (fixed-shape steps, CUDA graphs) for models it
    supports; else the dynamic cache. `check_every` k: look for "every row ended" every k tokens
    (a host sync on a GPU); the extra tokens are padding and are cut off.
    Runs under inference_mode; the returned tensors are ordinary ones (cloned), so they can
    enter an autograd forward afterwards."""
    with torch.inference_mode():
        ids, mask = _sample(model, prompt_ids, prompt_mask, max_new_tokens, eos_token_id, pad_token_id,
                            temperature, top_p, top_k, generator, greedy, group_size, decoder, check_every)
    return ids.clone(), mask.clone()


def _sample(model, prompt_ids, prompt_mask, max_new_tokens, eos_token_id, pad_token_id, temperature, top_p, top_k,
            generator, greedy, group_size, decoder=None, check_every=1):
    from . import fast_decode, static_decode

    batch, P = prompt_ids.shape
    device = prompt_ids.device
    position_ids = positions_from_mask(prompt_mask)
    repeat = group_size if group_size > 1 and shares_prompts(prompt_ids, prompt_mask, group_size) else 1
    bool_masks = takes_bool_masks(model)  # then build the 4D masks here: cheaper than HF's general path
    prefill_mask = prompt_mask[::repeat]
    out = model(input_ids=prompt_ids[::repeat], position_ids=position_ids[::repeat], use_cache=True, logits_to_keep=1,
                attention_mask=causal_bool_mask(prefill_mask) if bool_masks else prefill_mask)
    past = out.past_key_values
    next_logits = out.logits[:, -1, :].float()  # (B/repeat, V)
    if repeat > 1:
        past.batch_repeat_interleave(repeat)
        next_logits = next_logits.repeat_interleave(repeat, dim=0)  # (B, V)
    static_step = None
    if decoder is not None and bool_masks and static_decode.supports(decoder.model):
        static_step = decoder.start(past, prompt_mask, max_new_tokens)
    cache = fast_decode.cache_tensors(past) if static_step is None and bool_masks and fast_decode.supports(model) else None
    # keys: the prompt's valid tokens, then every generated position (rows that ended keep
    # decoding padding, which nothing reads)
    key_mask = torch.cat([prompt_mask, torch.ones(batch, max_new_tokens, dtype=prompt_mask.dtype, device=device)], 1)
    key_mask_4d = key_mask.bool()[:, None, None, :]  # (B, 1, 1, P+max_new_tokens)
    first_position = position_ids[:, -1:] + 1  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    pad = torch.full((batch,), pad_token_id, dtype=prompt_ids.dtype, device=device)
    tokens, masks = [], []
    for step in range(max_new_tokens):
        if greedy:
            next_tokens = next_logits.argmax(dim=-1)
        else:
            scaled = next_logits if temperature == 1.0 else next_logits / temperature
            next_tokens = sample_categorical(filter_logits(scaled, top_k, top_p), generator)
        next_tokens = torch.where(finished, pad, next_tokens)
        masks.append(~finished)
        tokens.append(next_tokens)
        finished = finished | (next_tokens == eos_token_id)
        if step == max_new_tokens - 1 or ((step + 1) % check_every == 0 and bool(finished.all())):
            break
        length = P + step + 1  # keys after this token is appended
        if static_step is not None:
            write_index = torch.full((1,), P + step, dtype=torch.long, device=device)
            next_logits = static_step(next_tokens.unsqueeze(1), first_position + step, write_index).float()
        elif cache is not None:
            next_logits = fast_decode.decode_step(model, next_tokens.unsqueeze(1), first_position + step, cache,
                                                  key_mask_4d[..., :length]).float()
        else:
            out = model(input_ids=next_tokens.unsqueeze(1), position_ids=first_position + step, past_key_values=past,
                        use_cache=True, attention_mask=key_mask_4d[..., :length] if bool_masks else key_mask[:, :length])
            past = out.past_key_values
            next_logits = out.logits[:, -1, :].float()
    completion_ids = torch.stack(tokens, dim=1)  # (B, T)
    completion_mask = torch.stack(masks, dim=1).long()  # (B, T)
    if check_every > 1:  # steps after every row ended hold only padding
        T = int(completion_mask.any(dim=0).nonzero().max()) + 1
        completion_ids, completion_mask = completion_ids[:, :T], completion_mask[:, :T]
    return completion_ids, completion_mask


def shares_prompts(prompt_ids: Tensor, prompt_mask: Tensor, group_size: int) -> bool:
    """True when the rows come in contiguous groups of `group_size` with one prompt per group."""
    rows = prompt_ids.shape[0]
    if group_size < 2 or rows % group_size:
        return False
    ids = prompt_ids.view(rows // group_size, group_size, -1)
    mask = prompt_mask.view(rows // group_size, group_size, -1)
    return bool((ids == ids[:, :1]).all()) and bool((mask == mask[:, :1]).all())


def _upcast(x: Tensor) -> Tensor:  # bf16/fp16 logits -> float32; float32/float64 unchanged
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


class _TokenLogps(torch.autograd.Function):
    """log softmax(z)[token] and the entropy of softmax(z), z = logits / temperature, without
    materializing the log-softmax: the forward keeps the logits and a logsumexp, the backward
    writes softmax(z)·(−g) into one buffer and adds g at the chosen tokens. The entropy has no
    gradient (it is a metric)."""

    @staticmethod
    def forward(ctx, logits, token_ids, temperature, with_entropy):  # (N, V), (N,) -> (N,), (N,)
        z = _upcast(logits)
        if temperature != 1.0:
            z = z / temperature
        lse = torch.logsumexp(z, dim=-1)  # (N,)
        logps = z.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1) - lse
        entropy = None
        if with_entropy:  # H = lse − Σ p·z, the sum as a batched dot product (no (N, V) product)
            p = torch.exp(z - lse.unsqueeze(-1))
            entropy = lse - torch.bmm(p.unsqueeze(1), z.unsqueeze(-1)).view(-1)
        ctx.save_for_backward(logits, token_ids, lse)
        ctx.temperature = temperature
        if entropy is None:
            entropy = torch.zeros_like(lse)
        ctx.mark_non_differentiable(entropy)
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, _grad_entropy):
        logits, token_ids, lse = ctx.saved_tensors
        t = ctx.temperature
        z = _upcast(logits) / t if t != 1.0 else _upcast(logits)
        grad = torch.exp(z - lse.unsqueeze(-1))  # softmax(z): the one (N, V) buffer
        grad.mul_(-grad_logps.unsqueeze(-1))  # d(−lse)/dz = −softmax(z)
        grad.scatter_add_(-1, token_ids.unsqueeze(-1), grad_logps.unsqueeze(-1))  # d(z[token])/dz
        if t != 1.0:
            grad.div_(t)
        return grad.to(logits.dtype), None, None, None


def token_logps(
    logits: Tensor,  # (B, T, V): position t predicts token t
    token_ids: Tensor,  # (B, T)
    temperature: float,
    with_entropy: bool,
) -> tuple[Tensor, Tensor]:
    """Per-token log-probs (B, T) and entropies (B, T) of softmax(logits / temperature)."""
    B, T, V = logits.shape
    logps, entropy = _TokenLogps.apply(logits.reshape(B * T, V), token_ids.reshape(B * T), temperature, with_entropy)
    return logps.view(B, T), entropy.view(B, T)


def _completion_token_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size,
                            temperature, with_entropy):
    """(logps, entropy), each (B, T); the lm head runs only on the positions that predict
    completion tokens.

    With group_size G > 1 (rows in groups sharing one prompt), each prompt runs through the model
    once and its KV cache is repeated G times: the gradient of all G completions still flows into
    the one prompt forward, and the prompt's FLOPs drop by a factor G."""
    num_completion = completion_ids.shape[1]
    if group_size > 1 and _can_pack(model, prompt_ids.shape[1] + group_size * num_completion):
        return _packed_group_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size,
                                   temperature, with_entropy)
    if group_size == 1:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P+T)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=positions_from_mask(attention_mask),
                       logits_to_keep=num_completion + 1).logits[:, :-1, :]  # position t predicts token t
        return token_logps(logits, completion_ids, temperature, with_entropy)
    unique_ids, unique_mask = prompt_ids[::group_size], prompt_mask[::group_size]  # (B/G, P)
    out = model(input_ids=unique_ids, attention_mask=unique_mask, position_ids=positions_from_mask(unique_mask),
                use_cache=True, logits_to_keep=1)
    first = out.logits.repeat_interleave(group_size, dim=0)  # (B, 1, V): predicts completion token 0
    first = token_logps(first, completion_ids[:, :1], temperature, with_entropy)
    if num_completion == 1:
        return first
    cache = out.past_key_values
    cache.batch_repeat_interleave(group_size)  # (B/G, ...) -> (B, ...), differentiable
    attention_mask = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1)  # (B, P+T-1)
    position_ids = positions_from_mask(attention_mask)[:, prompt_ids.shape[1]:]  # (B, T-1)
    rest = model(input_ids=completion_ids[:, :-1], attention_mask=attention_mask, position_ids=position_ids,
                 past_key_values=cache, use_cache=True).logits  # (B, T-1, V): token t-1 predicts token t
    rest = token_logps(rest, completion_ids[:, 1:], temperature, with_entropy)
    return torch.cat([first[0], rest[0]], dim=1), torch.cat([first[1], rest[1]], dim=1)


PACKED_MAX_LENGTH = 1024  # longer packed rows cost more in attention (∝ L²) than sharing saves


def _can_pack(model, packed_length: int) -> bool:
    """Packing needs a 4D boolean mask (see takes_bool_masks)."""
    return takes_bool_masks(model) and packed_length <= PACKED_MAX_LENGTH


def packed_group_layout(prompt_mask: Tensor, completion_mask: Tensor, group_size: int):
    """One row per group: [prompt, completion 1, …, completion G], length L = P + G·T.

    Returns (attention (n, 1, L, L) bool, True = may attend; position_ids (n, L)). A completion
    token sees the valid prompt tokens and the earlier valid tokens of its own completion, never
    another completion; each completion's positions continue from the prompt's, exactly as in
    its own unpacked row. Every query also sees itself, so padding never yields an all-masked
    row (NaN)."""
    G = group_size
    n, P = prompt_mask.shape[0] // G, prompt_mask.shape[1]
    T = completion_mask.shape[1]
    device = prompt_mask.device
    L = P + G * T
    pmask = prompt_mask[::G].bool()  # (n, P)
    key_valid = torch.cat([pmask, completion_mask.bool().reshape(n, G * T)], dim=1)  # (n, L)
    block = torch.cat([torch.full((P,), -1, device=device),
                       torch.arange(G, device=device).repeat_interleave(T)])  # (L,): -1 = prompt
    pos = torch.arange(L, device=device)
    visible = (pos[None, :] <= pos[:, None]) & ((block[None, :] == -1) | (block[None, :] == block[:, None]))
    attention = (visible[None] & key_valid[:, None, :]) | torch.eye(L, dtype=torch.bool, device=device)
    prompt_len = pmask.sum(dim=1, keepdim=True)  # (n, 1)
    completion_pos = prompt_len + torch.arange(T, device=device).repeat(G)[None]  # (n, G·T)
    position_ids = torch.cat([positions_from_mask(prompt_mask[::G]), completion_pos], dim=1)
    return attention[:, None], position_ids


def _packed_group_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size,
                        temperature, with_entropy):
    """Shared-prompt forward in ONE model call: each group becomes one packed row (see
    packed_group_layout), so the prompt's tokens run once per group and every weight gets one
    gradient matmul, not one per forward plus a sum."""
    G, (B, P), T = group_size, prompt_ids.shape, completion_ids.shape[1]
    n = B // G
    input_ids = torch.cat([prompt_ids[::G], completion_ids.reshape(n, G * T)], dim=1)  # (n, L)
    attention, position_ids = packed_group_layout(prompt_mask, completion_mask, G)
    offsets = P + torch.arange(G, device=input_ids.device)[:, None] * T  # (G, 1): where each completion starts
    keep = torch.cat([torch.tensor([P - 1], device=input_ids.device),  # last prompt token -> completion token 0
                      (offsets + torch.arange(T - 1, device=input_ids.device)[None]).reshape(-1)])  # t-1 -> t
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                   logits_to_keep=keep).logits  # (n, 1 + G·(T−1), V)
    first = token_logps(logits[:, :1].repeat_interleave(G, dim=0), completion_ids[:, :1], temperature, with_entropy)
    if T == 1:
        return first
    rest = logits[:, 1:].reshape(B, T - 1, logits.shape[-1])  # (B, T−1, V)
    rest = token_logps(rest, completion_ids[:, 1:], temperature, with_entropy)
    return torch.cat([first[0], rest[0]], dim=1), torch.cat([first[1], rest[1]], dim=1)


def completion_logps(
    model,
    prompt_ids: Tensor,  # (B, P)
    prompt_mask: Tensor,  # (B, P)
    completion_ids: Tensor,  # (B, T)
    completion_mask: Tensor,  # (B, T)
    temperature: float,
    with_entropy: bool = False,
    group_size: int = 1,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log π(o_t | prefix) at completion positions only, from logits / temperature
    (as TRL does). `group_size` G > 1 shares one prompt forward per group when the rows really
    come in groups of G with equal prompts (checked). Returns ((B, T), entropy (B, T) or None)."""
    if group_size > 1 and not shares_prompts(prompt_ids, prompt_mask, group_size):
        group_size = 1
    logps, entropy = _completion_token_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                             group_size, temperature, with_entropy)
    return logps, (entropy if with_entropy else None)


def reference_logps(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    temperature: float,
    group_size: int = 1,
) -> Tensor:
    """Log-probs that need no gradient (old policy, reference model), computed under
    inference_mode and returned as an ordinary tensor."""
    with torch.inference_mode():
        logps, _ = completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature,
                                    group_size=group_size)
    return logps.clone()
