"""Tier (b): the KV-cache sampler and the completion log-probs against plain forward passes."""

import torch

from grpo_core.generation import completion_logps, filter_logits, positions_from_mask, sample_completions
from grpo_core.models import build_tiny_model, build_tiny_tokenizer


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
    got, got_mask = sample_completions(model, ids, mask, max_new_tokens=6, eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.pad_token_id, temperature=1.0, top_p=1.0, top_k=0,
                                       generator=None, greedy=True)
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
    comp, comp_mask = sample_completions(model, ids, mask, max_new_tokens=5, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id, temperature=0.7, top_p=1.0, top_k=0,
                                         generator=gen)
    logps, entropy = completion_logps(model, ids, mask, comp, comp_mask, temperature=0.7, with_entropy=True)
    full = torch.cat([ids, comp], 1)
    full_mask = torch.cat([mask, comp_mask], 1)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions_from_mask(full_mask)).logits
    P = ids.shape[1]
    ref = torch.log_softmax(logits[:, P - 1:-1] / 0.7, -1).gather(-1, comp[..., None]).squeeze(-1)
    sel = comp_mask.bool()
    assert (logps[sel] - ref[sel]).abs().max().item() <= 1e-5
    probs = torch.softmax(logits[:, P - 1:-1] / 0.7, -1)
    ref_entropy = -(probs * torch.log(probs)).sum(-1)
    assert (entropy[sel] - ref_entropy[sel]).abs().max().item() <= 1e-4


def test_completion_mask_runs_through_first_eos_then_pads():
    tok, model, ids, mask = _tiny()
    comp, comp_mask = sample_completions(model, ids, mask, max_new_tokens=8, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id, temperature=1.0, top_p=1.0, top_k=0,
                                         generator=torch.Generator().manual_seed(1))
    for row, row_mask in zip(comp.tolist(), comp_mask.tolist()):
        if tok.eos_token_id in row:
            end = row.index(tok.eos_token_id)
            assert row_mask == [1] * (end + 1) + [0] * (len(row) - end - 1)
            assert all(t == tok.pad_token_id for t in row[end + 1:])
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
