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
    """Set to -inf the tokens outside the top-k and outside the smallest nucleus of mass top_p."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = (cum - sorted_logits.softmax(dim=-1)) >= top_p  # mass before this token ≥ p
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


@torch.no_grad()  # not inference_mode: the ids feed an autograd forward later
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
) -> tuple[Tensor, Tensor]:
    """Returns completion_ids (B, T) and completion_mask (B, T), T ≤ max_new_tokens; stops as
    soon as every row has produced EOS."""
    batch = prompt_ids.shape[0]
    device = prompt_ids.device
    attention_mask = prompt_mask.clone()
    position_ids = positions_from_mask(attention_mask)
    out = model(input_ids=prompt_ids, attention_mask=attention_mask, position_ids=position_ids,
                use_cache=True, logits_to_keep=1)
    past = out.past_key_values
    next_logits = out.logits[:, -1, :].float()  # (B, V)
    next_position = position_ids[:, -1:] + 1  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens, masks = [], []
    for step in range(max_new_tokens):
        if greedy:
            next_tokens = next_logits.argmax(dim=-1)
        else:
            filtered = filter_logits(next_logits / temperature, top_k, top_p)
            probs = filtered.softmax(dim=-1)
            next_tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)
        next_tokens = torch.where(finished, torch.full_like(next_tokens, pad_token_id), next_tokens)
        masks.append(~finished)
        tokens.append(next_tokens)
        finished = finished | (next_tokens == eos_token_id)
        if step == max_new_tokens - 1 or bool(finished.all()):
            break
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        out = model(input_ids=next_tokens.unsqueeze(1), attention_mask=attention_mask,
                    position_ids=next_position, past_key_values=past, use_cache=True)
        past = out.past_key_values
        next_logits = out.logits[:, -1, :].float()
        next_position = next_position + 1
    completion_ids = torch.stack(tokens, dim=1)  # (B, T)
    completion_mask = torch.stack(masks, dim=1).long()  # (B, T)
    return completion_ids, completion_mask


def completion_logps(
    model,
    prompt_ids: Tensor,  # (B, P)
    prompt_mask: Tensor,  # (B, P)
    completion_ids: Tensor,  # (B, T)
    completion_mask: Tensor,  # (B, T)
    temperature: float,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log π(o_t | prefix) at completion positions only, from logits / temperature
    (as TRL does); the lm head runs only on those positions. Returns ((B, T), entropy (B, T) or None)."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P+T)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    num_completion = completion_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=positions_from_mask(attention_mask),
                   logits_to_keep=num_completion + 1).logits  # (B, T+1, V)
    logits = logits[:, :-1, :].float() / temperature  # (B, T, V): position t predicts token t
    log_norm = torch.logsumexp(logits, dim=-1)  # (B, T)
    token_logits = logits.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    logps = token_logits - log_norm
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits.detach(), dim=-1)
            entropy = log_norm.detach() - (probs * logits.detach()).sum(-1)  # (B, T)
    return logps, entropy


def reference_logps(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    temperature: float,
) -> Tensor:
    """Log-probs that need no gradient (old policy, reference model)."""
    with torch.no_grad():
        logps, _ = completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature)
    return logps
