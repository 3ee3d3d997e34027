"""Tier (b): decoding with a static KV cache (the GPU path, run eagerly on the CPU) against the
dynamic cache and a plain forward, and LoRA folded into weight buffers against the unmerged model."""

import torch

from grpo_core.sampling.generation import positions_from_mask, returned_cache, sample_completions
from grpo_core.tasks.models import build_tiny_model, build_tiny_tokenizer
from grpo_core.sampling.static_decode import AdapterWeights, StaticCache, StaticDecoder, static_decode_step, supports


def _tiny(seed=3):
    tok = build_tiny_tokenizer()
    model = build_tiny_model(tok, seed=seed).eval()
    enc = tok(["12+3=", "1+2=", "45+67="], return_tensors="pt", padding=True, add_special_tokens=False)
    return tok, model, enc.input_ids, enc.attention_mask


def _sample(tok, model, ids, mask, decoder=None, **kw):
    return sample_completions(
        model,
        ids,
        mask,
        max_new_tokens=12,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        generator=torch.Generator().manual_seed(7),
        decoder=decoder,
        **kw,
    )


def test_static_step_logits_equal_a_plain_forward():
    tok, model, ids, mask = _tiny()
    assert supports(model)
    B, P = ids.shape
    tokens = torch.randint(4, len(tok), (B, 4), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), use_cache=True)
        cache = StaticCache(model, B, P + 64, torch.float32, ids.device)
        cache.fill(returned_cache(out), mask)
        first = positions_from_mask(mask)[:, -1:] + 1
        for t in range(tokens.shape[1]):
            logits = static_decode_step(model, cache, tokens[:, t : t + 1], first + t, torch.tensor([P + t]))
            full = torch.cat([ids, tokens[:, : t + 1]], 1)
            full_mask = torch.cat([mask, torch.ones_like(tokens[:, : t + 1])], 1)
            ref = model(input_ids=full, attention_mask=full_mask, position_ids=positions_from_mask(full_mask)).logits[
                :, -1
            ]
            assert (logits - ref).abs().max().item() <= 1e-5


def test_static_cache_samples_the_same_tokens_as_the_dynamic_cache():
    tok, model, ids, mask = _tiny()
    dynamic = _sample(tok, model, ids, mask)
    decoder = StaticDecoder(model)
    static = _sample(tok, model, ids, mask, decoder=decoder)
    assert decoder._cache is not None  # the static path ran, not a fallback
    assert torch.equal(dynamic[0], static[0]) and torch.equal(dynamic[1], static[1])
    again = _sample(tok, model, ids, mask, decoder=decoder)  # the cache is reused across generations
    assert torch.equal(again[0], static[0])
    # checking for "every row ended" only every 4 tokens: the same completions, padding cut off
    sparse = _sample(tok, model, ids, mask, decoder=decoder, check_every=4)
    assert torch.equal(sparse[0], static[0]) and torch.equal(sparse[1], static[1])


def test_lora_folded_weights_give_the_logits_of_the_unmerged_model():
    from peft import LoraConfig, get_peft_model

    tok, model, ids, mask = _tiny()
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    with torch.no_grad():  # trained adapters: B is no longer 0
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    peft_model.eval()
    base_before = {n: p.clone() for n, p in peft_model.named_parameters() if "lora" not in n}
    adapters = AdapterWeights(peft_model)
    assert adapters.modules  # every adapted linear has a buffer
    x = torch.randn(2, 1, 128, generator=torch.Generator().manual_seed(1))
    for module in adapters.modules:
        if module.in_features == 128:
            assert (adapters.linear(module, x) - module(x)).abs().max().item() <= 1e-5
    unmerged = _sample(tok, peft_model, ids, mask)
    folded = _sample(tok, peft_model, ids, mask, decoder=StaticDecoder(peft_model, adapters=adapters))
    assert torch.equal(unmerged[0], folded[0])
    assert all(torch.equal(p, base_before[n]) for n, p in peft_model.named_parameters() if "lora" not in n)
    with torch.no_grad():  # after an optimizer step the buffers follow the adapters
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(2)
    decoder = StaticDecoder(peft_model, adapters=adapters)
    refreshed = _sample(tok, peft_model, ids, mask, decoder=decoder)
    assert decoder._cache is not None  # the static path ran, not a fallback
    assert torch.equal(refreshed[0], _sample(tok, peft_model, ids, mask)[0])


def test_training_with_the_static_cache_matches_the_dynamic_cache(tmp_path):
    from conftest import make_cfg
    from grpo_core.run import TIMING_KEYS, read_metrics, run_training

    rows = {}
    for mode in ("dynamic", "static"):
        cfg = make_cfg(max_steps=3, decode=mode, use_peft=True, lora_r=4, beta=0.04, learning_rate=1e-2)
        run_training(cfg, tmp_path / mode, progress=False)
        rows[mode] = [
            {k: v for k, v in r.items() if k not in TIMING_KEYS}
            for r in read_metrics(tmp_path / mode / "metrics.jsonl")
        ]
    assert rows["static"] == rows["dynamic"]  # LoRA folded while sampling, adapters trained in between
