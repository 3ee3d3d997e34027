"""Tier (b): the sampler's lean decode paths and its prebuilt masks on Gemma 3's layout (a rotary
embedding per layer type, query and key norms, norms around the attention and the MLP, sliding-window
layers), against a plain forward pass, on a small random Gemma 3 (the real one: test_gemma.py)."""

import pytest
import torch

from grpo_core.sampling import fast_decode, generation
from grpo_core.sampling.generation import completion_logps, positions_from_mask, returned_cache, sample_completions
from grpo_core.sampling.static_decode import StaticCache, StaticDecoder, static_decode_step
from grpo_core.tasks.models import build_tiny_tokenizer


def _gemma(window: int = 64, seed: int = 0):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = build_tiny_tokenizer()
    config = Gemma3TextConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=window,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():  # the norms start at weight 0 (a scale of 1): give them weights to get wrong
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0, 0.5)
    enc = tok(["12+3=", "1+2=", "45+67="], return_tensors="pt", padding=True, add_special_tokens=False)
    return tok, model, enc.input_ids, enc.attention_mask


def _plain_last_logits(model, ids, mask, tokens):
    full = torch.cat([ids, tokens], 1)
    full_mask = torch.cat([mask, torch.ones_like(tokens)], 1)
    return model(input_ids=full, attention_mask=full_mask, position_ids=positions_from_mask(full_mask)).logits[:, -1]


def test_the_lean_paths_know_gemma3():
    _, model, _, _ = _gemma()
    assert fast_decode.supports(model)
    model.config.final_logit_softcapping = 30.0  # a softcap the lean step does not apply: general path
    assert not fast_decode.supports(model)


@pytest.mark.parametrize("path", ["dynamic", "static"])
def test_gemma3_decode_step_logits_equal_a_plain_forward(path):
    tok, model, ids, mask = _gemma()
    B, P = ids.shape
    tokens = torch.randint(4, len(tok), (B, 5), generator=torch.Generator().manual_seed(0))
    first = positions_from_mask(mask)[:, -1:] + 1
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), use_cache=True)
        if path == "static":
            static = StaticCache(model, B, P + 8, torch.float32, ids.device)
            static.fill(returned_cache(out), mask)
        else:
            cache = fast_decode.cache_tensors(returned_cache(out))
        for t in range(tokens.shape[1]):
            if path == "static":
                logits = static_decode_step(model, static, tokens[:, t : t + 1], first + t, torch.tensor([P + t]))
            else:
                key_mask = torch.cat([mask, torch.ones(B, t + 1, dtype=mask.dtype)], 1).bool()[:, None, None, :]
                logits = fast_decode.decode_step(model, tokens[:, t : t + 1], first + t, cache, key_mask)
            ref = _plain_last_logits(model, ids, mask, tokens[:, : t + 1])
            assert (logits - ref).abs().max().item() <= 1e-5


def _sample(tok, model, ids, mask, decoder=None, max_new_tokens=10):
    return sample_completions(
        model,
        ids.repeat_interleave(4, 0),
        mask.repeat_interleave(4, 0),
        max_new_tokens=max_new_tokens,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        generator=torch.Generator().manual_seed(5),
        group_size=4,
        decoder=decoder,
    )


def test_gemma3_samples_the_same_tokens_on_every_decode_path(monkeypatch):
    tok, model, ids, mask = _gemma()
    steps = []
    real_step = fast_decode.decode_step
    monkeypatch.setattr(fast_decode, "decode_step", lambda *a: steps.append(1) or real_step(*a))
    lean = _sample(tok, model, ids, mask)
    decoder = StaticDecoder(model)
    static = _sample(tok, model, ids, mask, decoder=decoder)
    assert steps and decoder._cache is not None  # both lean paths ran
    monkeypatch.setattr(fast_decode, "supports", lambda m: False)
    general = _sample(tok, model, ids, mask)
    for other in (static, general):
        assert torch.equal(lean[0], other[0]) and torch.equal(lean[1], other[1])


def test_a_sequence_longer_than_the_sliding_window_takes_the_models_own_masks(monkeypatch):
    # window 6, prompts of 5 and completions of 10 tokens: the sliding layers must not see past 6 tokens
    tok, model, ids, mask = _gemma(window=6)
    B, P = ids.shape
    assert generation.takes_bool_masks(model, P) and not generation.takes_bool_masks(model, P + 10)
    comp = torch.randint(4, len(tok), (B * 4, 10), generator=torch.Generator().manual_seed(1))
    comp_mask = torch.ones_like(comp)
    rows_ids, rows_mask = ids.repeat_interleave(4, 0), mask.repeat_interleave(4, 0)
    full = torch.cat([rows_ids, comp], 1)
    full_mask = torch.cat([rows_mask, comp_mask], 1)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions_from_mask(full_mask)).logits
        ref = torch.log_softmax(logits[:, P - 1 : -1].float(), -1).gather(-1, comp[..., None])[..., 0]
        for G in (1, 4):
            logps, _ = completion_logps(model, rows_ids, rows_mask, comp, comp_mask, 1.0, group_size=G)
            assert (logps - ref).abs().max().item() <= 1e-5
        # with full boolean masks the sliding layers would see the whole sequence: other log-probs
        monkeypatch.setattr(generation, "takes_bool_masks", lambda m, length: True)
        forced, _ = completion_logps(model, rows_ids, rows_mask, comp, comp_mask, 1.0, group_size=4)
    assert (forced - ref).abs().max().item() > 1e-3
    monkeypatch.undo()
    sampled = _sample(tok, model, ids, mask, max_new_tokens=12)  # past the window on HF's cache: no error
    assert sampled[0].shape[0] == B * 4
