"""Tier (a): the loss by hand; tier (b): vectorized aggregation against a plain loop."""

import dataclasses
import math

import pytest
import torch

from grpo_core.algo.loss import LossSettings as S, aggregate, clipped_surrogate, grpo_loss, k3_kl

# Unequal lengths: sequence 0 has 3 tokens, sequence 1 has 1 token (T = 3, max length 4)
VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])  # the 9s are padding
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize(
    "loss_type,expected",
    [
        ("grpo", 3.0),  # per-sequence means [2, 4] → mean 3
        ("bnpo", 2.5),  # Σ = 1+2+3+4 = 10 over 4 tokens
        ("dapo", 2.5),  # one micro-batch: the generation batch is this batch → 10 / 4
        ("dr_grpo", 1.25),  # 10 / (2 sequences × max_completion_length 4)
    ],
)
def test_aggregation_by_hand_unequal_lengths(loss_type, expected):
    assert aggregate(VALUES, MASK, S(loss_type, max_completion_length=4)).item() == pytest.approx(expected)


def test_dapo_normalizes_by_the_whole_generation_batch():
    # 10 / 8 tokens in the generation batch (this micro-batch holds half of them)
    got = aggregate(
        VALUES, MASK, S("dapo", max_completion_length=4, gradient_accumulation_steps=2, generation_batch_tokens=8.0)
    )
    assert got.item() == pytest.approx(1.25)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_micro_batch_share_is_divided_by_count(loss_type):
    one = aggregate(VALUES, MASK, S(loss_type, max_completion_length=4)).item()
    two = aggregate(VALUES, MASK, S(loss_type, max_completion_length=4, gradient_accumulation_steps=2)).item()
    assert two == pytest.approx(one / 2)


def test_unknown_loss_type_names_allowed_values():
    with pytest.raises(ValueError, match="grpo, bnpo, dapo, dr_grpo"):
        aggregate(VALUES, MASK, S("token_mean", max_completion_length=4))


def test_k3_kl_by_hand():
    # logp = 0, ref = log 0.5: d = −0.6931; exp(d) − d − 1 = 0.5 + 0.6931 − 1 = 0.1931
    kl = k3_kl(torch.tensor([[0.0, -1.0]]), torch.tensor([[math.log(0.5), -1.0]]))
    assert kl[0, 0].item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl[0, 1].item() == 0.0  # identical policies: exactly 0


@pytest.mark.parametrize(
    "log_ratio,adv,eps_high,loss,clipped",
    [
        (1.0, 1.0, 0.2, -1.2, True),  # ratio e, clipped to 1.2: −min(e, 1.2) = −1.2
        (1.0, 1.0, 0.28, -1.28, True),  # clip-higher ε_high = 0.28: −1.28
        (1.0, -1.0, 0.2, math.e, False),  # A < 0: −min(−e, −1.2) = e, the unclipped side
        (-1.0, -1.0, 0.2, 0.8, True),  # ratio 1/e < 0.8: −min(−0.368, −0.8) = 0.8
        (-1.0, 1.0, 0.2, -math.exp(-1), False),  # A > 0 and ratio low: −min(0.368, 0.8) = −0.368
        (0.0, 2.0, 0.2, -2.0, False),  # ratio 1: −A
    ],
)
def test_clipped_surrogate_by_hand(log_ratio, adv, eps_high, loss, clipped):
    per_token, is_clipped = clipped_surrogate(
        torch.tensor([[log_ratio]]), None, torch.tensor([[adv]]), S(epsilon=0.2, epsilon_high=eps_high)
    )
    assert per_token.item() == pytest.approx(loss, abs=1e-6)
    assert bool(is_clipped.item()) is clipped


def test_grpo_loss_at_step_one_is_zero_but_gradient_is_not():
    # claim C1: μ = 1, policy = reference; each sequence contributes −A_i, Σ A_i = 0 per group
    logps = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -0.2]], requires_grad=True)
    adv = torch.tensor([1.0, -1.0])
    loss, m = grpo_loss(logps, None, logps.detach().clone(), adv, MASK, S("grpo", beta=0.04, max_completion_length=4))
    assert abs(loss.item()) < 1e-7
    loss.backward()
    # ∂/∂logp_t of −A_i·ratio_t / L_i / B: seq 0 tokens −1/3/2, seq 1 first token +1/1/2
    torch.testing.assert_close(logps.grad, torch.tensor([[-1 / 6, -1 / 6, -1 / 6], [0.5, 0.0, 0.0]]))
    assert m["kl"].item() == 0.0 and m["kl_loss"].item() == 0.0


def test_bnpo_at_step_one_is_not_zero_with_unequal_lengths():
    # claim C1 corollary (TRL #2995): Σ_i −A_i·L_i / Σ L = (−1·3 + 1·1) / 4 = −0.5
    logps = torch.zeros(2, 3, requires_grad=True)
    loss, _ = grpo_loss(logps, None, None, torch.tensor([1.0, -1.0]), MASK, S("bnpo", max_completion_length=4))
    assert loss.item() == pytest.approx(-0.5)


def test_loss_is_policy_plus_kl_part():
    # policy −A per token plus β·KL: logp 0 vs ref log 0.5 → KL 0.1931 on every token
    logps = torch.zeros(2, 3, requires_grad=True)
    ref = torch.full((2, 3), math.log(0.5))
    loss, m = grpo_loss(logps, None, ref, torch.tensor([1.0, -1.0]), MASK, S("grpo", beta=0.1, max_completion_length=4))
    kl = 0.5 + math.log(2) - 1
    assert m["kl_loss"].item() == pytest.approx(0.1 * kl, abs=1e-6)
    assert m["policy_loss"].item() == pytest.approx(0.0, abs=1e-7)
    assert loss.item() == pytest.approx(m["policy_loss"].item() + m["kl_loss"].item())
    assert m["kl"].item() == pytest.approx(kl, abs=1e-6)


def test_clip_ratio_metric_with_stale_old_logps():
    # μ > 1: old log-probs from before an update; token ratios e, 1, 1/e with A = +1, +1, −1
    logps = torch.tensor([[1.0, 0.0, -1.0]])
    mask = torch.ones(1, 3)
    adv = torch.tensor([1.0])
    _, m = grpo_loss(logps, torch.zeros(1, 3), None, adv, mask, S("bnpo", max_completion_length=3))
    # A = +1: ratio e > 1.2 clipped; ratio 1 not; ratio 1/e < 0.8 but A > 0 → not clipped: 1/3
    assert m["clip_ratio"].item() == pytest.approx(1 / 3)


def _loop_reference(values, mask, loss_type, max_len, n_micro, total_tokens):
    """Plain-Python restatement of each aggregation mode, token by token."""
    rows = [[float(v) for v, k in zip(vr, mr) if k] for vr, mr in zip(values.tolist(), mask.tolist())]
    if loss_type == "grpo":
        return sum(sum(r) / max(len(r), 1) for r in rows) / len(rows) / n_micro
    tokens = sum(len(r) for r in rows)
    s = sum(sum(r) for r in rows)
    if loss_type == "bnpo":
        return s / tokens / n_micro
    if loss_type == "dapo":
        return s / total_tokens
    return s / (len(rows) * max_len) / n_micro


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_vectorized_aggregation_agrees_with_loop(loss_type):
    gen = torch.Generator().manual_seed(7)
    for _ in range(20):
        values = torch.randn(6, 9, generator=gen)
        lengths = torch.randint(1, 10, (6,), generator=gen)
        mask = (torch.arange(9)[None, :] < lengths[:, None]).long()
        total = float(lengths.sum()) * 3  # as if this were one of three micro-batches
        got = aggregate(
            values,
            mask,
            S(loss_type, max_completion_length=12, gradient_accumulation_steps=3, generation_batch_tokens=total),
        )
        assert got.item() == pytest.approx(_loop_reference(values, mask, loss_type, 12, 3, total), rel=1e-5)


@pytest.mark.parametrize("corrected", [False, True])
def test_bias_corrected_kl_by_hand(corrected):
    # One token, on-policy (old = logp.detach()), advantage 0 so only β·KL moves it. logp = −1,
    # ref = −1.5, so d = ref − logp = −0.5 and KL = e^d − d − 1 = e^−0.5 − 0.5.
    # d KL / d logp = 1 − e^d = 0.39347;  with the ratio e^(logp − old) (value 1):
    # d (KL·ratio) / d logp = (1 − e^d) + KL = −d = logp − ref = 0.5 (TRL's use_bias_correction_kl)
    logps = torch.tensor([[-1.0]], requires_grad=True)
    ref = torch.tensor([[-1.5]])
    loss, m = grpo_loss(
        logps,
        None,
        ref,
        torch.tensor([0.0]),
        torch.ones(1, 1),
        S("grpo", beta=0.1, max_completion_length=1, use_bias_correction_kl=corrected),
    )
    loss.backward()
    kl = math.exp(-0.5) - 0.5
    assert loss.item() == pytest.approx(0.1 * kl, abs=1e-7)  # the value does not change on-policy
    assert m["kl"].item() == pytest.approx(kl, abs=1e-7)
    expected_grad = 0.1 * (0.5 if corrected else 1 - math.exp(-0.5))
    assert logps.grad.item() == pytest.approx(expected_grad, abs=1e-7)


def test_bias_corrected_kl_weights_each_token_by_its_ratio_off_policy():
    # μ > 1: logp − old = log 2 on the token, so the KL term (and the logged kl) doubles
    logps = torch.tensor([[-1.0]])
    old = logps - math.log(2.0)
    ref = torch.tensor([[-1.5]])
    _, plain = grpo_loss(
        logps, old, ref, torch.tensor([0.0]), torch.ones(1, 1), S("grpo", beta=1.0, max_completion_length=1)
    )
    _, corrected = grpo_loss(
        logps,
        old,
        ref,
        torch.tensor([0.0]),
        torch.ones(1, 1),
        S("grpo", beta=1.0, max_completion_length=1, use_bias_correction_kl=True),
    )
    assert corrected["kl_loss"].item() == pytest.approx(2 * plain["kl_loss"].item(), rel=1e-6)
    assert corrected["kl"].item() == pytest.approx(2 * plain["kl"].item(), rel=1e-6)


# ---- importance_sampling_level: sequence (GSPO) ----------------------------------------------------------
def test_sequence_level_ratio_and_clipping_by_hand_unequal_lengths():
    # Sequence 0: 3 tokens with log-ratios 0.3, 0.3, 0.3 → mean 0.3, ratio e^0.3 = 1.3499 > 1.2: with
    # A = +1 clipped to 1.2 → loss −1.2. Sequence 1: 1 token, log-ratio ln 0.9 → ratio 0.9, inside the
    # band; A = −2 → −min(−1.8, −1.8) = 1.8. The padding of sequence 1 (log-ratio 5) must not count.
    old = torch.zeros(2, 3)
    logps = torch.tensor([[0.3, 0.3, 0.3], [math.log(0.9), 5.0, 5.0]])
    adv = torch.tensor([1.0, -2.0])
    settings = S("grpo", importance_sampling_level="sequence", max_completion_length=4)
    loss, m = grpo_loss(logps, old, None, adv, MASK, settings)
    assert loss.item() == pytest.approx((-1.2 + 1.8) / 2)  # grpo: mean of the per-sequence losses
    assert m["clip_ratio"].item() == pytest.approx(1 / 2)  # one sequence of two clipped
    bnpo, _ = grpo_loss(logps, old, None, adv, MASK, dataclasses.replace(settings, loss_type="bnpo"))
    assert bnpo.item() == pytest.approx((3 * -1.2 + 1.8) / 4)  # every token carries its sequence's loss


def test_sequence_level_gradient_spreads_evenly_over_a_sequences_tokens():
    # On-policy (ratio 1, no clipping): d loss / d logp_t = −A / |o| for each of the sequence's tokens
    logps = torch.tensor([[-1.0, -2.0, -0.5], [-0.7, -9.0, -9.0]], requires_grad=True)
    loss, _ = grpo_loss(
        logps,
        None,
        None,
        torch.tensor([1.0, -2.0]),
        MASK,
        S("grpo", importance_sampling_level="sequence", max_completion_length=4),
    )
    loss.backward()
    expected = torch.tensor([[-1 / 3 / 2] * 3, [2 / 1 / 2, 0.0, 0.0]])
    torch.testing.assert_close(logps.grad, expected)


def test_unknown_importance_sampling_level_names_allowed_values():
    with pytest.raises(ValueError, match="token, sequence"):
        grpo_loss(
            torch.zeros(1, 1),
            None,
            None,
            torch.zeros(1),
            torch.ones(1, 1),
            S("grpo", importance_sampling_level="segment"),
        )


# ---- zero-variance groups dropped (claim C6) ---------------------------------------------------------------
def test_dropped_rows_leave_grpo_and_dr_grpo_normalizers_by_hand():
    # Three sequences; row 2 belongs to a dropped group (mask 0). Per-sequence means [2, 4, –]:
    # grpo over the 2 live sequences → 3 (not 6 / 3 = 2); dr_grpo: 10 / (2 × 4) = 1.25.
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert aggregate(values, mask, S("grpo", max_completion_length=4, live_sequences=2.0)).item() == pytest.approx(3.0)
    assert aggregate(values, mask, S("dr_grpo", max_completion_length=4, live_sequences=2.0)).item() == pytest.approx(
        1.25
    )
    assert aggregate(values, mask, S("grpo", max_completion_length=4)).item() == pytest.approx(2.0)  # kept: 6 / 3


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_dropping_groups_is_training_on_the_live_groups_alone(loss_type):
    # Loss and gradient with groups 1 and 3 of 4 masked out (over 2 micro-batches) equal those of the
    # batch made of groups 0 and 2 alone. (bnpo is per micro-batch by definition: left out.)
    gen = torch.Generator().manual_seed(3)
    G, groups, T = 3, 4, 6
    logps = (torch.randn(groups * G, T, generator=gen) - 1).requires_grad_(True)
    adv = torch.randn(groups * G, generator=gen)
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (groups * G,), generator=gen)[:, None]).long()
    live = torch.tensor([1, 0, 1, 0]).repeat_interleave(G).bool()
    drop_mask = mask * live.unsqueeze(1).long()
    settings = S(
        loss_type,
        max_completion_length=T,
        gradient_accumulation_steps=2,
        generation_batch_tokens=drop_mask.sum().float(),
        live_sequences=float(live.sum()),
    )
    half = groups * G // 2
    dropped = sum(
        grpo_loss(logps[s : s + half], None, None, adv[s : s + half], drop_mask[s : s + half], settings)[0]
        for s in (0, half)
    )
    alone = grpo_loss(
        logps[live],
        None,
        None,
        adv[live],
        mask[live],
        S(loss_type, max_completion_length=T, generation_batch_tokens=mask[live].sum().float()),
    )[0]
    (g_dropped,) = torch.autograd.grad(dropped, logps)
    (g_alone,) = torch.autograd.grad(alone, logps)
    assert dropped.item() == pytest.approx(alone.item(), abs=1e-7)
    torch.testing.assert_close(g_dropped, g_alone, atol=1e-7, rtol=0)
    assert g_dropped[~live].abs().max() == 0


@pytest.mark.parametrize("registry", ["SURROGATES", "LOSS_TYPES", "IMPORTANCE_SAMPLING_LEVELS"])
def test_a_name_registered_twice_is_refused(registry):
    import grpo_core.algo.loss as loss_module

    reg = getattr(loss_module, registry)
    name = next(iter(reg))
    before = reg.get(name)
    with pytest.raises(ValueError, match=f"'{name}' is registered already"):
        reg.add(name, lambda *args: None)
    assert reg.get(name) is before  # the first definition stands


# ---- CISPO (loss_type cispo) ---------------------------------------------------------------------------


def test_cispo_by_hand_unequal_lengths_and_a_clipped_weight():
    # per token −min(r, ε_high)·A·logp (the weight detached), summed over completion tokens ÷ the batch's
    # tokens (dapo's normalizer, as TRL pairs them). Row 0: 2 tokens, ratios e^0.5 and e^2 (> ε_high = 5:
    # clipped to 5, with A > 0); row 1: 1 token, ratio 1, A < 0.
    logps = torch.tensor([[-1.0, -0.5, -9.0], [-2.0, -9.0, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.5, 0.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.tensor([1.0, -0.5])
    settings = S("cispo", epsilon_high=5.0, max_completion_length=3)
    loss, m = grpo_loss(logps, old, None, adv, mask, settings)
    w0, w1 = math.exp(0.5), 5.0  # row 0's weights: e^0.5, and e^2 = 7.39 clipped to 5
    want = (-w0 * 1.0 * -1.0 - w1 * 1.0 * -0.5 - 1.0 * -0.5 * -2.0) / 3
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert m["clip_ratio"].item() == pytest.approx(1 / 3)  # one of the three completion tokens
    (grad,) = torch.autograd.grad(loss, logps)  # ∂/∂logp = −w·A / 3: every token has a gradient, clipped or not
    torch.testing.assert_close(grad, torch.tensor([[-w0 / 3, -w1 / 3, 0.0], [0.5 / 3, 0.0, 0.0]]), atol=1e-6, rtol=0)


def test_cispo_refuses_sequence_level_ratios_as_trl_does():
    from conftest import make_cfg
    from grpo_core.config.validation import validate
    from grpo_core.util.errors import ConfigError

    with pytest.raises(ConfigError, match="loss_type: got cispo with importance_sampling_level 'sequence'"):
        validate(make_cfg(loss_type="cispo", importance_sampling_level="sequence"))


# ---- SAPO (loss_type sapo) -----------------------------------------------------------------------------


def test_sapo_by_hand_a_soft_gate_per_sign_of_the_advantage():
    # per token −(4/τ)·σ(τ(r − 1))·A, τ = 1 where A > 0 and 1.05 elsewhere; then grpo's aggregation
    # (per-sequence mean, then mean over sequences). Row 0 (A = 1): ratios 1 and e^0.5, 2 tokens;
    # row 1 (A = −0.5): ratio 1, 1 token (the padded ones count nowhere).
    logps = torch.tensor([[-1.0, -0.5, -9.0], [-2.0, -9.0, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.0, 0.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.tensor([1.0, -0.5])
    loss, m = grpo_loss(logps, old, None, adv, mask, S("sapo", max_completion_length=3))

    def sig(x):
        return 1 / (1 + math.exp(-x))

    r = math.exp(0.5)
    row0 = (-(4 / 1.0) * sig(0.0) * 1.0 - (4 / 1.0) * sig(1.0 * (r - 1)) * 1.0) / 2
    row1 = -(4 / 1.05) * sig(0.0) * -0.5
    assert loss.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    assert m["clip_ratio"].item() == 0.0  # a soft gate clips nothing
    (grad,) = torch.autograd.grad(loss, logps)
    # ∂ℓ/∂logp = −A·(4/τ)·σ'(τ(r−1))·τ·r = −4·A·σ(x)(1 − σ(x))·r: at r = 1, −A (the unclipped surrogate's)
    x = r - 1
    want = torch.tensor([[-1.0 / 4, -4 * sig(x) * (1 - sig(x)) * r / 4, 0.0], [0.5 / 2, 0.0, 0.0]])
    torch.testing.assert_close(grad, want, atol=1e-6, rtol=0)


def test_sapo_temperatures_must_be_positive():
    from conftest import make_cfg
    from grpo_core.config.validation import validate
    from grpo_core.util.errors import ConfigError

    for key in ("sapo_temperature_pos", "sapo_temperature_neg"):
        for bad in (0.0, -1.0, float("inf")):
            with pytest.raises(ConfigError, match=key):
                validate(make_cfg(**{key: bad}))


# ---- top_entropy_quantile ------------------------------------------------------------------------------


def test_top_entropy_quantile_by_hand():
    # completion-token entropies 0.1, 0.9, 0.5 (row 0) and 0.3 (row 1; its other tokens are padding):
    # the 0.5 quantile of [0.1, 0.3, 0.5, 0.9] is 0.4 (linear interpolation), so the tokens of 0.9 and
    # 0.5 keep their policy loss. On-policy (ratio 1) each kept token's loss is −A; grpo's aggregation
    # still divides row 0 by its 3 tokens: (−1 −1)/3 for row 0, 0 for row 1, mean −1/3.
    from grpo_core.algo.loss import entropy_threshold

    logps = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -9.0, -9.0]], requires_grad=True)
    entropies = torch.tensor([[0.1, 0.9, 0.5], [0.3, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    threshold = entropy_threshold(entropies[mask.bool()], 0.5)
    assert threshold.item() == pytest.approx(0.4)
    settings = S("grpo", max_completion_length=3, top_entropy_quantile=0.5, entropy_threshold=threshold)
    loss, m = grpo_loss(logps, None, None, torch.tensor([1.0, -1.0]), mask, settings, entropies)
    assert loss.item() == pytest.approx(-1 / 3)
    assert m["entropy_mask_share"].item() == pytest.approx(0.5)
    (grad,) = torch.autograd.grad(loss, logps)
    assert grad[0, 0] == 0 and grad[1].abs().sum() == 0 and grad[0, 1] != 0  # masked tokens: no policy gradient
    with pytest.raises(ValueError, match="needs the tokens' entropies"):
        grpo_loss(logps, None, None, torch.tensor([1.0, -1.0]), mask, settings)


def test_top_entropy_quantile_must_be_a_share():
    from conftest import make_cfg
    from grpo_core.config.validation import validate
    from grpo_core.util.errors import ConfigError

    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError, match=r"top_entropy_quantile: .*allowed: a (number in \(0, 1\]|finite number)"):
            validate(make_cfg(top_entropy_quantile=bad))


# ---- the two-sided clip (delta) and the KL estimators -------------------------------------------------


@pytest.mark.parametrize(
    "log_ratio,adv,loss",
    [
        (0.5, -1.0, math.exp(0.5)),  # A < 0, ratio 1.65 < delta 2: −min(−1.65, −1.2) = 1.65, as without delta
        (1.0, -1.0, 2.0),  # ratio e > delta: −min(−e, −1.2) = e, bounded at delta · |A| = 2
        (2.0, -1.0, 2.0),  # ratio e² = 7.4: still 2 (verl's dual-clip: −A·c)
        (-1.0, -1.0, 0.8),  # ratio 1/e: the clipped side 0.8, as without delta
        (1.0, 1.0, -1.2),  # A > 0: the clip at 1 + ε_high = 1.2 binds first
    ],
)
def test_two_sided_clip_by_hand(log_ratio, adv, loss):
    per_token, _ = clipped_surrogate(
        torch.tensor([[log_ratio]]), None, torch.tensor([[adv]]), S(epsilon=0.2, epsilon_high=0.2, delta=2.0)
    )
    assert per_token.item() == pytest.approx(loss, abs=1e-6)


def test_kl_estimators_by_hand():
    from grpo_core.algo.loss import KL_ESTIMATORS

    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])  # d = ref − logp = −0.5, 1
    torch.testing.assert_close(KL_ESTIMATORS.get("k1")(logp, ref), torch.tensor([[0.5, -1.0]]))
    torch.testing.assert_close(KL_ESTIMATORS.get("k2")(logp, ref), torch.tensor([[0.125, 0.5]]))
    torch.testing.assert_close(
        KL_ESTIMATORS.get("k3")(logp, ref), torch.tensor([[math.exp(-0.5) + 0.5 - 1, math.e - 1 - 1]])
    )
    # each reaches the loss as β · the estimate, aggregated like the policy loss (grpo: per-sequence mean)
    lp = logp.clone().requires_grad_(True)
    for name, per_token in (("k1", [0.5, -1.0]), ("k2", [0.125, 0.5])):
        loss, m = grpo_loss(lp, None, ref, torch.tensor([0.0]), torch.ones(1, 2), S(beta=0.1, kl_estimator=name))
        assert m["kl_loss"].item() == pytest.approx(0.1 * sum(per_token) / 2)
        assert m["kl"].item() == pytest.approx(sum(per_token) / 2)


def test_delta_must_exceed_one():
    from conftest import make_cfg
    from grpo_core.config.validation import validate
    from grpo_core.util.errors import ConfigError

    for bad in (1.0, 0.5, float("inf")):
        with pytest.raises(ConfigError, match="delta: "):
            validate(make_cfg(delta=bad))
    validate(make_cfg(delta=1.5))


def test_kl_in_reward_leaves_the_loss_without_its_kl_term_but_measures_it():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    loss, m = grpo_loss(logp, None, ref, torch.tensor([1.0]), torch.ones(1, 2), S(beta=0.1, kl_in_reward=True))
    assert m["kl_loss"].item() == 0.0 and loss.item() == pytest.approx(m["policy_loss"].item())
    assert m["kl"].item() == pytest.approx((math.exp(-0.5) + 0.5 - 1 + math.e - 2) / 2)  # still logged (k3)


def test_kl_in_reward_needs_a_kl_weight_and_no_resampling():
    from conftest import make_cfg
    from grpo_core.config.validation import validate
    from grpo_core.util.errors import ConfigError

    with pytest.raises(ConfigError, match="kl_in_reward: got True; allowed: false unless beta > 0"):
        validate(make_cfg(kl_in_reward=True))
    with pytest.raises(ConfigError, match="kl_in_reward: .*resample"):
        validate(make_cfg(kl_in_reward=True, beta=0.04, zero_variance_groups="resample"))
