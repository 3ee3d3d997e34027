"""Tier (b): the KV-cache sampler and the completion log-probs against plain forward passes."""

import torch

import pytest

import grpo_core.sampling.generation as generation
from grpo_core.sampling import fast_decode
from grpo_core.sampling.generation import (
    completion_logps,
    filter_logits,
    positions_from_mask,
    sample_categorical,
    sample_completions,
    token_logps,
)
from grpo_core.tasks.models import build_tiny_model, build_tiny_tokenizer


def _tiny():
    tok = build_tiny_tokenizer()
    model = build_tiny_model(tok, seed=3).eval()
    enc = tok(["12+3=", "1+2=", "45+67="], return_tensors="pt", padding=True, add_special_tokens=False)
    return tok, model, enc.input_ids, enc.attention_mask


def test_tokenizer_is_character_level_and_round_trips():
    tok = build_tiny_tokenizer()
    ids = tok("12+34=", add_special_tokens=False).input_ids
    assert len(ids) == 6
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == "12+34="


def test_greedy_kv_cache_sampler_matches_no_cache_loop():
    tok, model, ids, mask = _tiny()
    got, got_mask = sample_completions(
        model,
        ids,
        mask,
        max_new_tokens=6,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        generator=None,
        greedy=True,
    )
    # reference: re-run the whole sequence each step, no cache
    seq, seq_mask = ids.clone(), mask.clone()
    ref = []
    with torch.no_grad():
        for _ in range(got.shape[1]):
            logits = model(input_ids=seq, attention_mask=seq_mask, position_ids=positions_from_mask(seq_mask)).logits
            nxt = logits[:, -1].argmax(-1)
            ref.append(nxt)
            seq = torch.cat([seq, nxt[:, None]], 1)
            seq_mask = torch.cat([seq_mask, torch.ones_like(seq_mask[:, :1])], 1)
    ref = torch.stack(ref, 1)
    assert torch.equal(got[got_mask.bool()], ref[got_mask.bool()])


def test_completion_logps_match_plain_forward_within_1e5():
    tok, model, ids, mask = _tiny()
    gen = torch.Generator().manual_seed(0)
    comp, comp_mask = sample_completions(
        model,
        ids,
        mask,
        max_new_tokens=5,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=0.7,
        top_p=1.0,
        top_k=0,
        generator=gen,
    )
    logps, entropy = completion_logps(model, ids, mask, comp, comp_mask, temperature=0.7, with_entropy=True)
    full = torch.cat([ids, comp], 1)
    full_mask = torch.cat([mask, comp_mask], 1)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions_from_mask(full_mask)).logits
    P = ids.shape[1]
    ref = torch.log_softmax(logits[:, P - 1 : -1] / 0.7, -1).gather(-1, comp[..., None]).squeeze(-1)
    sel = comp_mask.bool()
    assert (logps[sel] - ref[sel]).abs().max().item() <= 1e-5
    probs = torch.softmax(logits[:, P - 1 : -1] / 0.7, -1)
    ref_entropy = -(probs * torch.log(probs)).sum(-1)
    assert (entropy[sel] - ref_entropy[sel]).abs().max().item() <= 1e-4


def test_completion_mask_runs_through_first_eos_then_pads():
    tok, model, ids, mask = _tiny()
    comp, comp_mask = sample_completions(
        model,
        ids,
        mask,
        max_new_tokens=8,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        generator=torch.Generator().manual_seed(1),
    )
    for row, row_mask in zip(comp.tolist(), comp_mask.tolist()):
        if tok.eos_token_id in row:
            end = row.index(tok.eos_token_id)
            assert row_mask == [1] * (end + 1) + [0] * (len(row) - end - 1)
            assert all(t == tok.pad_token_id for t in row[end + 1 :])
        else:
            assert all(row_mask)


def test_top_k_and_top_p_filters_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept_k = torch.isfinite(filter_logits(logits, 2, 1.0))
    assert kept_k.tolist() == [[True, True, False, False]]
    # top_p 0.7: cumulative 0.5, 0.8 → keep tokens until mass ≥ 0.7: first two
    kept_p = torch.isfinite(filter_logits(logits, 0, 0.7))
    assert kept_p.tolist() == [[True, True, False, False]]
    # top_p 0.4: the first token alone has 0.5 ≥ 0.4
    assert torch.isfinite(filter_logits(logits, 0, 0.4)).tolist() == [[True, False, False, False]]


# ---- the speed paths agree with the plain ones --------------------------------------
def _grouped_batch(G=4, temperature=0.8):
    """Three prompts of different lengths × G sampled completions, some ending early."""
    tok = build_tiny_tokenizer()
    model = build_tiny_model(tok, seed=3).eval()
    enc = tok(["12+3=", "1+2=", "45+67="], return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc.input_ids.repeat_interleave(G, 0), enc.attention_mask.repeat_interleave(G, 0)
    comp, comp_mask = sample_completions(
        model,
        ids,
        mask,
        max_new_tokens=6,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=temperature,
        top_p=1.0,
        top_k=0,
        generator=torch.Generator().manual_seed(5),
        group_size=G,
    )
    return model, ids, mask, comp, comp_mask


def _plain_logps(model, ids, mask, comp, comp_mask, temperature):
    full, full_mask = torch.cat([ids, comp], 1), torch.cat([mask, comp_mask], 1)
    logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions_from_mask(full_mask)).logits
    T = comp.shape[1]
    return torch.log_softmax(logits[:, -T - 1 : -1] / temperature, -1).gather(-1, comp[..., None]).squeeze(-1)


@pytest.mark.parametrize("path", ["packed", "shared_cache"])
def test_shared_prompt_logps_and_gradients_match_a_plain_forward(path, monkeypatch):
    if path == "shared_cache":  # too long to pack: the KV-cache sharing path
        monkeypatch.setattr(generation, "PACKED_MAX_LENGTH", 0)
    G, temperature = 4, 0.8
    model, ids, mask, comp, comp_mask = _grouped_batch(G, temperature)
    sel = comp_mask.bool()
    assert comp_mask.sum(1).unique().numel() > 1  # some completions ended early: padding is exercised
    ref = _plain_logps(model, ids, mask, comp, comp_mask, temperature)
    got, _ = completion_logps(model, ids, mask, comp, comp_mask, temperature, group_size=G)
    assert (got[sel] - ref[sel]).abs().max().item() <= 1e-5  # the bound, float32
    params = list(model.parameters())
    ref_grads = torch.autograd.grad((ref * sel).sum(), params)
    got_grads = torch.autograd.grad((got * sel).sum(), params)
    for r, g in zip(ref_grads, got_grads):
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())


def test_shared_prompt_path_falls_back_when_rows_are_not_groups():
    model, ids, mask, comp, comp_mask = _grouped_batch(G=4)
    ids, mask = ids.roll(1, 0), mask.roll(1, 0)  # groups no longer hold one prompt each: must not share
    assert not generation.shares_prompts(ids, mask, 4)
    ref = _plain_logps(model, ids, mask, comp, comp_mask, 0.8)
    got, _ = completion_logps(model, ids, mask, comp, comp_mask, 0.8, group_size=4)
    sel = comp_mask.bool()
    assert (got[sel] - ref[sel]).abs().max().item() <= 1e-5


def test_packed_layout_by_hand():
    # two groups of G = 2 completions of T = 3 tokens after a prompt of P = 2.
    # Group 0: prompt [pad, p]; completion a has 3 tokens, b ended after 2 (mask 1, 1, 0).
    # Group 1: prompt [q0, q1]; both completions ended after their first token.
    prompt_mask = torch.tensor([[0, 1], [0, 1], [1, 1], [1, 1]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]])
    packed = generation.PackedGroups(prompt_mask, completion_mask, group_size=2)
    assert packed.length == 5  # the prompt, then a0, a1, b0: a last token predicts nothing
    # group 0, columns: pad, p, a0, a1, b0
    assert packed.attention[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0],  # the pad sees only itself
        [0, 1, 0, 0, 0],  # p
        [0, 1, 1, 0, 0],  # a0: prompt + itself
        [0, 1, 1, 1, 0],  # a1: prompt + a0 + itself
        [0, 1, 0, 0, 1],  # b0: prompt + itself, never a*
    ]
    # group 1 feeds in no completion token: columns q0, q1 and three padding columns
    assert packed.attention[1, 0].int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],  # padding: the prompt and itself
        [1, 1, 0, 1, 0],
        [1, 1, 0, 0, 1],
    ]
    assert packed.position_ids.tolist() == [[0, 0, 1, 2, 1], [0, 1, 2, 2, 2]]
    assert packed.source.tolist() == [[0, 1, 3], [0, 0, 0]]  # a0, a1, b0 in the group's G·T tokens
    # the position (from P − 1) predicting each token: a1 from a0 (1), a2 from a1 (2), b1 from b0 (3)
    assert packed.predictor.tolist() == [[0, 1, 2], [0, 3, 0], [0, 0, 0], [0, 0, 0]]


def test_token_logps_gradient_and_entropy_by_reference():
    torch.manual_seed(0)
    for temperature in (1.0, 0.7):
        x = torch.randn(2, 3, 7, dtype=torch.double, requires_grad=True)
        ids = torch.randint(0, 7, (2, 3))
        assert torch.autograd.gradcheck(lambda z, i=ids, t=temperature: token_logps(z, i, t, True)[0], (x,))
        logps, entropy = token_logps(x, ids, temperature, True)
        ref = torch.log_softmax(x / temperature, -1)
        assert torch.allclose(logps, ref.gather(-1, ids[..., None]).squeeze(-1))
        assert torch.allclose(entropy, -(ref.exp() * ref).sum(-1))


def test_sample_categorical_matches_the_distribution_and_never_picks_filtered_tokens():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2])
    logits = torch.log(probs).expand(20_000, 4)  # the zero-probability token has logit -inf
    draws = sample_categorical(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=4).double() / draws.numel()
    assert freq[1] == 0
    assert (freq - probs.double()).abs().max().item() < 0.015  # ~4.5 standard errors at n = 20,000


def test_sample_categorical_on_some_rows_uses_those_rows_uniforms():
    logits = torch.randn(10, 6, generator=torch.Generator().manual_seed(1))
    rows = torch.tensor([1, 4, 7])
    every = sample_categorical(logits, torch.Generator().manual_seed(0))
    some = sample_categorical(logits[rows], torch.Generator().manual_seed(0), rows, 10)
    assert torch.equal(some, every[rows])


def test_leaving_ended_rows_out_of_the_decode_batch_changes_no_token(monkeypatch):
    # check_every=2 keeps every row in the decode batch; check_every=1 leaves out rows that ended
    tok, model, ids, mask = _tiny()
    ids, mask = ids.repeat_interleave(16, 0), mask.repeat_interleave(16, 0)  # 48 rows
    kwargs = dict(
        max_new_tokens=24,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=1.5,
        top_p=1.0,
        top_k=0,
        group_size=16,
    )
    calls, real_step = [], fast_decode.decode_step
    monkeypatch.setattr(
        fast_decode,
        "decode_step",
        lambda model, tokens, *a: calls.append(tokens.shape[0]) or real_step(model, tokens, *a),
    )
    left_out = sample_completions(model, ids, mask, generator=torch.Generator().manual_seed(4), check_every=1, **kwargs)
    rows_seen, calls[:] = list(calls), []
    kept = sample_completions(model, ids, mask, generator=torch.Generator().manual_seed(4), check_every=2, **kwargs)
    assert min(rows_seen) < 48 and set(calls) == {48}  # rows were left out, and only with check_every=1
    assert torch.equal(left_out[0], kept[0]) and torch.equal(left_out[1], kept[1])


def test_sampler_with_prebuilt_boolean_masks_equals_hf_masks(monkeypatch):
    tok, model, ids, mask = _tiny()
    ids, mask = ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)
    kwargs = dict(
        max_new_tokens=6,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        group_size=3,
    )
    fast = sample_completions(model, ids, mask, generator=torch.Generator().manual_seed(2), **kwargs)
    monkeypatch.setattr(generation, "takes_bool_masks", lambda m, length: False)
    monkeypatch.setattr(generation, "shares_prompts", lambda *a: False)
    slow = sample_completions(model, ids, mask, generator=torch.Generator().manual_seed(2), **kwargs)
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_entropy_has_the_gradient_of_the_naive_entropy(temperature):
    # entropy_coef puts H in the loss: the fused log-prob function's ∂H/∂logits = −p·(z − Σ p·z)/τ
    # must be the gradient of −Σ softmax·log_softmax (float64; gradcheck too)
    from grpo_core.sampling.token_logps import TokenLogps as _TokenLogps

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    ids = torch.randint(0, 7, (5,), generator=gen)
    assert torch.autograd.gradcheck(lambda x: _TokenLogps.apply(x, ids, temperature, True), (logits,))
    lp, H = _TokenLogps.apply(logits, ids, temperature, True)
    z = logits / temperature
    ref_lp = torch.log_softmax(z, -1).gather(-1, ids[:, None]).squeeze(-1)
    ref_H = -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1)
    w1, w2 = torch.randn(5, dtype=torch.float64, generator=gen), torch.randn(5, dtype=torch.float64, generator=gen)
    (g,) = torch.autograd.grad((lp * w1).sum() + (H * w2).sum(), logits)
    (want,) = torch.autograd.grad((ref_lp * w1).sum() + (ref_H * w2).sum(), logits, retain_graph=True)
    torch.testing.assert_close(g, want, atol=1e-12, rtol=0)
    (only_lp,) = torch.autograd.grad((_TokenLogps.apply(logits, ids, temperature, True)[0] * w1).sum(), logits)
    (want_lp,) = torch.autograd.grad((ref_lp * w1).sum(), logits)
    torch.testing.assert_close(only_lp, want_lp, atol=1e-12, rtol=0)  # an unused entropy adds nothing


@pytest.mark.parametrize("path", ["packed", "shared_cache", "plain"])
def test_grad_forward_size_counts_what_the_forward_runs(path, monkeypatch):
    # the memory gate's estimate (util/memory.py) rests on these counts: token positions through the
    # decoder and rows through the lm head, counted here by hooks on the model's real forward
    G = 4
    model, ids, mask, comp, comp_mask = _grouped_batch(G)
    if path == "shared_cache":
        monkeypatch.setattr(generation, "PACKED_MAX_LENGTH", 0)
    if path == "plain":  # rows that are not groups of one prompt
        ids, mask = ids.roll(1, 0), mask.roll(1, 0)
    assert generation.takes_bool_masks(model, ids.shape[1] + comp.shape[1])
    seen = {"positions": 0, "rows": 0}
    inner = model.get_input_embeddings()
    head = model.get_output_embeddings()
    hooks = [
        inner.register_forward_hook(lambda m, i, o: seen.__setitem__("positions", seen["positions"] + i[0].numel())),
        head.register_forward_hook(lambda m, i, o: seen.__setitem__("rows", seen["rows"] + o.numel() // o.shape[-1])),
    ]
    try:
        completion_logps(model, ids, mask, comp, comp_mask, 0.8, group_size=G)
    finally:
        for h in hooks:
            h.remove()
    got = generation.grad_forward_size(model, ids, mask, comp_mask, group_size=G)
    assert got == (seen["positions"], seen["rows"])
    B, P = mask.shape
    T = comp.shape[1]
    by_hand = {
        "packed": None,
        "shared_cache": (B // G * P + B * (T - 1), B // G + B * (T - 1)),
        "plain": (B * (P + T), B * (T + 1)),
    }[path]
    if by_hand is not None:
        assert got == by_hand
    else:  # the packed rows: prompt + the longest group's fed tokens, one row per group
        length = P + max(int((comp_mask[g * G : (g + 1) * G].sum(1) - 1).clamp(min=0).sum()) for g in range(B // G))
        assert got == (B // G * length, B // G * (length - P + 1))


@pytest.mark.parametrize("path", ["one_per_row", "packed", "shared_cache"])
def test_the_lm_head_in_chunks_gives_the_plain_forwards_logps_entropies_and_gradients(path, monkeypatch):
    """Above LOGITS_BYTES (Gemma 3's 262k vocabulary) the head runs on a few rows at a time, its logits
    computed again in the backward: here forced on the tiny model, with chunks of 3 rows (so chunks
    end mid-completion), on each forward path; log-probs, entropies and the gradients of every
    weight, the head's included (full fine-tuning), equal the plain forward's."""
    from grpo_core.sampling import token_logps as chunked

    G, temperature = 4, 0.8
    model, ids, mask, comp, comp_mask = _grouped_batch(G, temperature)
    group = 1 if path == "one_per_row" else G
    if path == "shared_cache":
        monkeypatch.setattr(generation, "PACKED_MAX_LENGTH", 0)
    sel = comp_mask.bool()
    ref = _plain_logps(model, ids, mask, comp, comp_mask, temperature)
    full, full_mask = torch.cat([ids, comp], 1), torch.cat([mask, comp_mask], 1)
    logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions_from_mask(full_mask)).logits
    probs = torch.softmax(logits[:, -comp.shape[1] - 1 : -1] / temperature, -1)
    ref_entropy = -(probs * torch.log(probs)).sum(-1)
    monkeypatch.setattr(chunked, "LOGITS_BYTES", 0)  # every forward through the head in chunks
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 3 * 4 * model.config.vocab_size)  # 3 rows a chunk
    calls = []
    real = chunked.ChunkedHeadLogps.forward
    monkeypatch.setattr(chunked.ChunkedHeadLogps, "forward", staticmethod(lambda *a: calls.append(1) or real(*a)))
    got, entropy = completion_logps(model, ids, mask, comp, comp_mask, temperature, with_entropy=True, group_size=group)
    assert calls  # the chunked head ran
    assert (got[sel] - ref[sel]).abs().max().item() <= 1e-5
    assert (entropy[sel] - ref_entropy[sel]).abs().max().item() <= 1e-4
    params = list(model.parameters())
    weights = torch.rand(got.shape, generator=torch.Generator().manual_seed(1))
    ref_grads = torch.autograd.grad(((ref + 0.1 * ref_entropy) * weights * sel).sum(), params)
    got_grads = torch.autograd.grad(((got + 0.1 * entropy) * weights * sel).sum(), params)
    head = next(i for i, p in enumerate(params) if p is model.lm_head.weight)
    assert got_grads[head].abs().max() > 0  # the head trains here, and its gradient came through the chunks
    for r, g in zip(ref_grads, got_grads):
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())
