"""Sampling G completions per prompt with a KV cache, and per-token log-probs of completions.

Prompts are left-padded; position ids come from the attention mask so padded and unpadded rows
see the same positions. Completion tokens run through the first EOS (included in the mask);
what follows is padding with mask 0.
"""

from __future__ import annotations

import functools
import inspect
from typing import Optional

import torch

from grpo_core.sampling.token_logps import (ChunkedHeadLogps, TokenLogps, chunks_logits, decoder_of, lm_head_of,
                                           unwrapped)

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


def cache_kwarg(model, cache) -> dict:
    """The keyword that hands a KV cache to `model`'s forward: `cache` in transformers ≥ 5.24
    (`past_key_values`, its old name, warns there and goes in 5.40), `past_key_values` before.
    Asked of the model's own class, through a DDP or PEFT wrapper (which pass **kwargs on)."""
    return {_cache_keyword(type(unwrapped(model))): cache}


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def returned_cache(out):
    """The KV cache a forward with use_cache=True returned (`cache`, formerly `past_key_values`)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def takes_bool_masks(model, length: int) -> bool:
    """True for SDPA attention where every layer may attend every earlier token of a `length`-token
    sequence: HF then passes a 4D boolean mask (True = may attend) straight to SDPA, so this module
    can build it. HF hands a 4D mask to a sliding-window layer unchanged too (Gemma 3's layers of a
    512-token window), so such a model takes these masks only while the sequence fits the window,
    where the window hides nothing; longer sequences take HF's own masks."""
    config = getattr(getattr(model, "module", model), "config", None)  # through a DDP wrapper (data parallel)
    if getattr(config, "_attn_implementation", None) != "sdpa" or getattr(config, "use_sliding_window", False):
        return False
    window = sliding_window(config)
    return window is None or length <= window


def sliding_window(config) -> int | None:
    """The window of a model whose layers include sliding-window ones (Gemma 3), else None."""
    window = getattr(config, "sliding_window", None)
    return window if window and "sliding_attention" in (getattr(config, "layer_types", None) or ()) else None


def causal_bool_mask(attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, 1, L, L)
    """Causal attention over the valid keys; every query also sees itself (no all-masked row)."""
    L = attention_mask.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=attention_mask.device).tril_()
    return ((causal[None] & attention_mask.bool()[:, None, :]) | torch.eye(L, dtype=torch.bool,
                                                                            device=attention_mask.device))[:, None]


def sample_categorical(logits: Tensor, generator: torch.Generator | None,
                       rows: Tensor | None = None, total_rows: int | None = None) -> Tensor:  # (B, V) -> (B,)
    """One draw per row from softmax(logits) by inverting the CDF with one uniform per row.
    Same distribution as torch.multinomial(softmax(logits), 1), which draws an exponential
    variate for every vocabulary entry (slow at a real vocabulary: results/benchmarks/README.md).
    `rows`: which of `total_rows` rows these logits belong to; uniforms are drawn for all
    `total_rows`, so the random stream, and each row's uniform, do not depend on which rows
    are still decoding."""
    weights = (logits - logits.max(dim=-1, keepdim=True).values).exp_()  # unnormalized; -inf -> 0
    cdf = weights.cumsum_(dim=-1)  # (B, V), in place
    n = cdf.shape[0] if rows is None else total_rows
    u = torch.rand(n, 1, generator=generator, device=cdf.device, dtype=cdf.dtype)
    if rows is not None:
        u = u[rows]
    u = u * cdf[:, -1:]
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
    from grpo_core.sampling import fast_decode
    from grpo_core.sampling import static_decode

    batch, P = prompt_ids.shape
    device = prompt_ids.device
    position_ids = positions_from_mask(prompt_mask)
    repeat = group_size if group_size > 1 and shares_prompts(prompt_ids, prompt_mask, group_size) else 1
    bool_masks = takes_bool_masks(model, P + max_new_tokens)  # then build the 4D masks here: cheaper than HF's general path
    prefill_mask = prompt_mask[::repeat]
    out = model(input_ids=prompt_ids[::repeat], position_ids=position_ids[::repeat], use_cache=True, logits_to_keep=1,
                attention_mask=causal_bool_mask(prefill_mask) if bool_masks else prefill_mask)
    past = returned_cache(out)
    next_logits = out.logits[:, -1, :].float()  # (B/repeat, V)
    if repeat > 1:
        past.batch_repeat_interleave(repeat)
        next_logits = next_logits.repeat_interleave(repeat, dim=0)  # (B, V)
    static_step = None
    if decoder is not None and bool_masks and static_decode.supports(decoder.model):
        static_step = decoder.start(past, prompt_mask, max_new_tokens)
    cache = fast_decode.cache_tensors(past) if static_step is None and bool_masks and fast_decode.supports(model) else None
    # keys: the prompt's valid tokens, then every generated position (on the static and general
    # paths rows that ended keep decoding padding, which nothing reads)
    key_mask = torch.cat([prompt_mask, torch.ones(batch, max_new_tokens, dtype=prompt_mask.dtype, device=device)], 1)
    key_mask_4d = key_mask.bool()[:, None, None, :]  # (B, 1, 1, P+max_new_tokens)
    first_position = position_ids[:, -1:] + 1  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    pad = torch.full((batch,), pad_token_id, dtype=prompt_ids.dtype, device=device)
    # the dynamic-cache path drops rows that ended from the decode batch: `rows` are the ones
    # still decoding (None: all), and next_logits, the cache and the masks hold only those
    rows, compact = None, cache is not None and check_every == 1
    tokens, masks = [], []
    for step in range(max_new_tokens):
        if greedy:
            drawn = next_logits.argmax(dim=-1)
        else:
            scaled = next_logits if temperature == 1.0 else next_logits / temperature
            drawn = sample_categorical(filter_logits(scaled, top_k, top_p), generator, rows, batch)
        if rows is not None:  # back to all rows; the left-out ones have ended
            drawn = pad.index_put((rows,), drawn)
        next_tokens = torch.where(finished, pad, drawn)
        masks.append(~finished)
        tokens.append(next_tokens)
        finished = finished | (next_tokens == eos_token_id)
        if step == max_new_tokens - 1 or ((step + 1) % check_every == 0 and bool(finished.all())):
            break
        length = P + step + 1  # keys after this token is appended
        step_tokens = next_tokens if rows is None else next_tokens.index_select(0, rows)
        if compact:
            alive = ~finished if rows is None else ~finished[rows]  # over the rows now decoding
            keep = alive.nonzero().squeeze(1)
            if 8 * keep.numel() <= 7 * alive.numel():  # an eighth of them ended: leave those out
                cache = [[k.index_select(0, keep), v.index_select(0, keep)] for k, v in cache]
                key_mask_4d = key_mask_4d.index_select(0, keep)
                first_position = first_position.index_select(0, keep)
                step_tokens = step_tokens.index_select(0, keep)
                rows = keep if rows is None else rows.index_select(0, keep)
        if static_step is not None:
            write_index = torch.full((1,), P + step, dtype=torch.long, device=device)
            next_logits = static_step(next_tokens.unsqueeze(1), first_position + step, write_index).float()
        elif cache is not None:
            next_logits = fast_decode.decode_step(model, step_tokens.unsqueeze(1), first_position + step, cache,
                                                  key_mask_4d[..., :length]).float()
        else:
            out = model(input_ids=next_tokens.unsqueeze(1), position_ids=first_position + step, **cache_kwarg(model, past),
                        use_cache=True, attention_mask=key_mask_4d[..., :length] if bool_masks else key_mask[:, :length])
            past = returned_cache(out)
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


def token_logps(
    logits: Tensor,  # (B, T, V): position t predicts token t
    token_ids: Tensor,  # (B, T)
    temperature: float,
    with_entropy: bool,
) -> tuple[Tensor, Tensor]:
    """Per-token log-probs (B, T) and entropies (B, T) of softmax(logits / temperature)."""
    B, T, V = logits.shape
    logps, entropy = TokenLogps.apply(logits.reshape(B * T, V), token_ids.reshape(B * T), temperature, with_entropy)
    return logps.view(B, T), entropy.view(B, T)


def _head_logps(model, out, keep: int, token_ids: Tensor, temperature: float, with_entropy: bool,
                rows: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Log-probs and entropies (each (B, T), or (N,) with `rows`) of `token_ids` under the last `keep`
    positions of a forward's output `out`: its logits (B, keep, V), or, from _forward_for_logps on a
    model whose logits would not fit whole, its decoder's hidden states, through the LM head in chunks.
    `rows` picks rows of the flattened (B·keep) positions (the packed path)."""
    if not getattr(out, "chunked", False):
        logits = out.logits[:, -keep:, :] if out.logits.shape[1] != keep else out.logits
        if rows is None:
            return token_logps(logits, token_ids, temperature, with_entropy)
        return TokenLogps.apply(logits.reshape(-1, logits.shape[-1]).index_select(0, rows), token_ids, temperature,
                                with_entropy)
    hidden = out.last_hidden_state[:, -keep:, :]  # (B, keep, H): what the head would read
    flat = hidden.reshape(-1, hidden.shape[-1])
    flat = flat.index_select(0, rows) if rows is not None else flat
    head = lm_head_of(model)
    logps, entropy = ChunkedHeadLogps.apply(flat, head.weight, head.bias, token_ids.reshape(-1), temperature,
                                            with_entropy)
    return (logps, entropy) if rows is not None else (logps.view(token_ids.shape), entropy.view(token_ids.shape))


def _forward_for_logps(model, keep: int, **kwargs):
    """The model's forward for the log-probs of its last `keep` positions: its logits where they fit
    (LOGITS_BYTES), else its decoder's hidden states (marked `chunked`), for _head_logps to run the
    LM head on in chunks. Either way the output carries the KV cache where use_cache asks for it."""
    rows = kwargs["input_ids"].shape[0] * keep
    if not chunks_logits(model, rows):
        return model(**kwargs, logits_to_keep=keep)
    out = decoder_of(model)(**kwargs)
    out.chunked = True
    return out


def _completion_token_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size,
                            temperature, with_entropy):
    """(logps, entropy), each (B, T); the lm head runs only on the positions that predict
    completion tokens.

    With group_size G > 1 (rows in groups sharing one prompt), each prompt runs through the model
    once: packed with its G completions into one row (see PackedGroups), or, for rows too long
    to pack, with its KV cache repeated G times. The gradient of all G completions still flows
    into the one prompt forward, and the prompt's FLOPs drop by a factor G."""
    num_completion = completion_ids.shape[1]
    if group_size > 1 and takes_bool_masks(model, prompt_ids.shape[1] + num_completion):
        packed = PackedGroups(prompt_mask, completion_mask, group_size)
        if packed.length <= PACKED_MAX_LENGTH:
            return _packed_group_logps(model, packed, prompt_ids, completion_ids, completion_mask, temperature,
                                       with_entropy)
    if group_size == 1:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P+T)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        out = _forward_for_logps(model, num_completion + 1, input_ids=input_ids, attention_mask=attention_mask,
                                 position_ids=positions_from_mask(attention_mask))
        if not getattr(out, "chunked", False):
            logits = out.logits[:, :-1, :]  # position t predicts token t
            return token_logps(logits, completion_ids, temperature, with_entropy)
        out.last_hidden_state = out.last_hidden_state[:, :-1, :]  # the last position predicts nothing
        return _head_logps(model, out, num_completion, completion_ids, temperature, with_entropy)
    unique_ids, unique_mask = prompt_ids[::group_size], prompt_mask[::group_size]  # (B/G, P)
    out = _forward_for_logps(model, 1, input_ids=unique_ids, attention_mask=unique_mask,
                             position_ids=positions_from_mask(unique_mask), use_cache=True)
    if not getattr(out, "chunked", False):
        first = out.logits.repeat_interleave(group_size, dim=0)  # (B, 1, V): predicts completion token 0
        first = token_logps(first, completion_ids[:, :1], temperature, with_entropy)
    else:  # the prompt's last hidden state, once per completion: each has its own first token
        out.last_hidden_state = out.last_hidden_state[:, -1:, :].repeat_interleave(group_size, dim=0)
        first = _head_logps(model, out, 1, completion_ids[:, :1], temperature, with_entropy)
    if num_completion == 1:
        return first
    cache = returned_cache(out)
    cache.batch_repeat_interleave(group_size)  # (B/G, ...) -> (B, ...), differentiable
    attention_mask = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1)  # (B, P+T-1)
    position_ids = positions_from_mask(attention_mask)[:, prompt_ids.shape[1]:]  # (B, T-1)
    out = _forward_for_logps(model, num_completion - 1, input_ids=completion_ids[:, :-1], attention_mask=attention_mask,
                             position_ids=position_ids, **cache_kwarg(model, cache), use_cache=True)
    rest = _head_logps(model, out, num_completion - 1, completion_ids[:, 1:], temperature, with_entropy)  # t-1 predicts t
    return torch.cat([first[0], rest[0]], dim=1), torch.cat([first[1], rest[1]], dim=1)


PACKED_MAX_LENGTH = 1024  # longer packed rows cost more in attention (∝ L²) than sharing saves


class PackedGroups:
    """One row per group of G completions of one prompt: [prompt (P), the inputs of completion
    1, …, the inputs of completion G, padding], length `length` = P + the longest group's
    inputs. A completion of L tokens (its mask) contributes only its first L − 1 tokens: token
    t is predicted from the output at token t − 1, token 0 from the prompt's last position, and
    the last token predicts nothing. So no padding runs between completions.

    Attributes (n = B / G groups, W = length − P):
      attention (n, 1, L, L) bool, True = may attend: a completion token sees the valid prompt
        tokens and the earlier tokens of its own completion, never another completion; every
        query also sees itself, so padding never yields an all-masked row (NaN);
      position_ids (n, L): each completion's positions continue from the prompt's, exactly as in
        its own unpadded row;
      source (n, W): index into the group's completion tokens (G·T, flattened) placed in each
        column after the prompt (0 in padding columns);
      predictor (B, T): for each completion token, the position (counted from P − 1) whose
        output predicts it; 0 for tokens past the completion's end."""

    def __init__(self, prompt_mask: Tensor, completion_mask: Tensor, group_size: int):
        G = group_size
        B, P = prompt_mask.shape
        n, T = B // G, completion_mask.shape[1]
        device = prompt_mask.device
        lengths = completion_mask.sum(dim=1)  # (B,)
        inputs = _fed_tokens(completion_mask, G)
        starts = inputs.cumsum(dim=1) - inputs  # (n, G): where each completion's inputs begin, after the prompt
        ends = starts + inputs
        W = int(inputs.sum(dim=1).max())
        self.length = P + W
        col = torch.arange(W, device=device)
        owner = (col[None, None, :] >= ends[:, :, None]).sum(dim=1)  # (n, W): the completion of each column; G = padding
        valid = owner < G
        owner_c = owner.clamp(max=G - 1)
        within = torch.where(valid, col[None, :] - starts.gather(1, owner_c), 0)  # (n, W): index in its completion
        self.source = torch.where(valid, owner_c * T + within, 0)
        pmask = prompt_mask[::G].bool()  # (n, P)
        key_valid = torch.cat([pmask, valid], dim=1)  # (n, L)
        block = torch.cat([torch.full((n, P), -1, device=device), owner], dim=1)  # -1 = prompt, G = padding
        L = self.length
        pos = torch.arange(L, device=device)
        causal = pos[None, :] <= pos[:, None]  # (L, L)
        same = (block[:, None, :] == -1) | (block[:, None, :] == block[:, :, None])  # (n, L, L)
        attention = (causal[None] & same & key_valid[:, None, :]) | torch.eye(L, dtype=torch.bool, device=device)
        self.attention = attention[:, None]
        prompt_len = pmask.sum(dim=1, keepdim=True)  # (n, 1)
        self.position_ids = torch.cat([positions_from_mask(prompt_mask[::G]), prompt_len + within], dim=1)
        t = torch.arange(T, device=device)[None, :]  # (1, T)
        row_starts = starts.reshape(B, 1)
        self.predictor = torch.where((t >= 1) & (t < lengths[:, None]), row_starts + t, torch.zeros_like(t))


def _fed_tokens(completion_mask: Tensor, group_size: int) -> Tensor:  # (B, T) -> (B/G, G)
    """The tokens each completion feeds into a packed row: all but its last."""
    return (completion_mask.sum(dim=1) - 1).clamp(min=0).view(-1, group_size)


def grad_forward_size(model, prompt_ids: Tensor, prompt_mask: Tensor, completion_mask: Tensor,
                      group_size: int = 1) -> tuple[int, int]:
    """(token positions through the decoder, rows of lm-head logits) of completion_logps on these
    rows: what its forward, and the backward after it, hold in memory. Takes the path it takes."""
    B, P = prompt_mask.shape
    T = completion_mask.shape[1]
    G = group_size if group_size > 1 and shares_prompts(prompt_ids, prompt_mask, group_size) else 1
    if G > 1 and takes_bool_masks(model, P + T):
        length = P + int(_fed_tokens(completion_mask, G).sum(dim=1).max())
        if length <= PACKED_MAX_LENGTH:
            return B // G * length, B // G * (length - P + 1)
    if G == 1:
        return B * (P + T), B * (T + 1)
    return B // G * P + B * (T - 1), B // G + B * (T - 1)


def _packed_group_logps(model, packed: PackedGroups, prompt_ids, completion_ids, completion_mask, temperature,
                        with_entropy):
    """Shared-prompt forward in ONE model call: each group becomes one packed row (PackedGroups),
    so the prompt's tokens run once per group, no padding runs between completions, and every
    weight gets one gradient matmul, not one per forward plus a sum. The lm head runs on the
    positions from the prompt's last one on; log-probs and entropies are computed for the
    completion tokens only (zero past each completion's end)."""
    B, T = completion_ids.shape
    n = packed.source.shape[0]
    G = B // n
    tokens = completion_ids.reshape(n, G * T)
    input_ids = torch.cat([prompt_ids[::G], tokens.gather(1, packed.source)], dim=1)  # (n, L)
    K = packed.length - prompt_ids.shape[1] + 1
    out = _forward_for_logps(model, K, input_ids=input_ids, attention_mask=packed.attention,
                             position_ids=packed.position_ids)  # (n, K, ·): from the prompt's last position on
    sel = completion_mask.bool()  # (B, T)
    group_of_row = torch.arange(B, device=completion_ids.device) // G
    rows = (group_of_row[:, None] * K + packed.predictor)[sel]  # (N,) rows of the (n·K) positions
    logps, entropy = _head_logps(model, out, K, completion_ids[sel], temperature, with_entropy, rows=rows)
    zeros = torch.zeros(B, T, dtype=logps.dtype, device=logps.device)
    return zeros.masked_scatter(sel, logps), zeros.masked_scatter(sel, entropy)


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
