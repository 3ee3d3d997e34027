"""Tier (b): our loss against TRL 1.16's own `_compute_loss` (tests/trl_reference.py), value and
gradient, on micro-batches with unequal lengths, stale old log-probs and a reference model."""

import pytest
import torch

from grpo_core.algo.loss import LossSettings, grpo_loss
from trl_reference import trl_loss

pytest.importorskip("trl", reason="TRL is the [bench] extra; scripts/bootstrap.sh installs it")

B, T = 6, 5


def _batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    logps = (torch.randn(B, T, generator=gen) * 0.5 - 1).requires_grad_(True)
    old = logps.detach() + torch.randn(B, T, generator=gen) * 0.15  # μ > 1: the ratio has left 1, clipping acts
    ref = logps.detach() + torch.randn(B, T, generator=gen) * 0.2
    adv = torch.randn(B, generator=gen)
    lengths = torch.tensor([5, 3, 1, 4, 2, 5])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return logps, old, ref, adv, mask


def agree(settings: LossSettings, seed: int = 0, rel: float = 4 * 2**-23, **trl_extra) -> None:
    logps, old, ref, adv, mask = _batch(seed)
    ref = ref if settings.beta else None
    ours, _ = grpo_loss(logps, old, ref, adv, mask, settings)
    theirs = trl_loss(
        logps,
        old,
        ref,
        adv,
        mask,
        loss_type=settings.loss_type,
        beta=settings.beta,
        epsilon=settings.epsilon,
        epsilon_high=settings.epsilon_high,
        max_completion_length=settings.max_completion_length,
        use_bias_correction_kl=settings.use_bias_correction_kl,
        **trl_extra,
    )
    (ours_grad,) = torch.autograd.grad(ours, logps)
    (theirs_grad,) = torch.autograd.grad(theirs, logps)
    # two float32 computations in different orders: equal up to a few units in the last place (on an Intel
    # Xeon the sequence-level grpo loss with β > 0 parts by 2 ulps, 1.2e-7 at 0.515; by ≤ 1 on an AMD EPYC)
    assert ours.item() == pytest.approx(theirs.item(), rel=rel, abs=1e-7)
    torch.testing.assert_close(ours_grad, theirs_grad, atol=1e-7, rtol=rel)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("beta, corrected", [(0.0, False), (0.04, False), (0.04, True)])
def test_every_loss_type_agrees_with_trl(loss_type, beta, corrected):
    for seed in range(3):
        agree(
            LossSettings(
                loss_type, beta=beta, max_completion_length=T, use_bias_correction_kl=corrected, epsilon_high=0.28
            ),
            seed,
        )


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("beta, corrected", [(0.0, False), (0.04, True)])
def test_sequence_level_importance_sampling_agrees_with_trl(loss_type, beta, corrected):
    # GSPO: TRL's importance_sampling_level="sequence" (a (B, 1) ratio broadcast over the tokens)
    for seed in range(3):
        agree(
            LossSettings(
                loss_type,
                importance_sampling_level="sequence",
                beta=beta,
                max_completion_length=T,
                use_bias_correction_kl=corrected,
                epsilon=3e-4,
                epsilon_high=4e-4,
            ),
            seed,
            importance_sampling_level="sequence",
        )


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_masked_truncated_completions_agree_with_trl(loss_type):
    # mask_truncated_completions: TRL zeroes the mask of every row whose last token is neither EOS nor
    # pad (grpo_trainer.py, _generate_and_score_completions); the trainer does the same to its loss
    # mask from "no EOS in the row". Rows 0 and 5 fill all T tokens without EOS here.
    EOS, PAD = 2, 0
    logps, old, ref, adv, mask = _batch(0)
    ids = torch.full((B, T), 5)
    lengths = mask.sum(dim=1)
    for row, n in enumerate(lengths.tolist()):
        ids[row, n:] = PAD
        if row not in (0, 5):
            ids[row, n - 1] = EOS
    trl_mask = mask * torch.tensor([ids[r, -1].item() in (EOS, PAD) for r in range(B)]).unsqueeze(1).long()
    ours_mask = mask * (ids == EOS).any(dim=1).unsqueeze(1).long()
    assert torch.equal(ours_mask, trl_mask) and trl_mask[[0, 5]].sum() == 0
    settings = LossSettings(loss_type, max_completion_length=T, epsilon_high=0.28)
    ours, _ = grpo_loss(logps, old, None, adv, ours_mask, settings)
    theirs = trl_loss(logps, old, None, adv, trl_mask, loss_type=loss_type, epsilon_high=0.28, max_completion_length=T)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-7)
    assert ours.item() != pytest.approx(grpo_loss(logps, old, None, adv, mask, settings)[0].item(), abs=1e-4)


@pytest.mark.parametrize("beta, corrected", [(0.0, False), (0.04, False), (0.04, True)])
@pytest.mark.parametrize("epsilon_high", [5.0, 1.1])  # TRL's recommended ε_max, and one that clips
def test_cispo_agrees_with_trl(beta, corrected, epsilon_high):
    # the policy and KL terms are aggregated apart here (loss = policy_loss + kl_loss exactly), summed per
    # token first in TRL: with the bias-corrected KL the two orders part by up to ~6 ulps (7e-7 relative)
    for seed in range(3):
        agree(
            LossSettings(
                "cispo", beta=beta, max_completion_length=T, use_bias_correction_kl=corrected, epsilon_high=epsilon_high
            ),
            seed,
            rel=1e-6,
        )


@pytest.mark.parametrize("beta, corrected", [(0.0, False), (0.04, True)])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("temperatures", [(1.0, 1.05), (4.0, 0.5)])  # TRL's defaults, and others
def test_sapo_agrees_with_trl(beta, corrected, level, temperatures):
    pos, neg = temperatures
    for seed in range(3):
        agree(
            LossSettings(
                "sapo",
                importance_sampling_level=level,
                beta=beta,
                max_completion_length=T,
                use_bias_correction_kl=corrected,
                sapo_temperature_pos=pos,
                sapo_temperature_neg=neg,
            ),
            seed,
            rel=1e-6,
            importance_sampling_level=level,
            sapo_temperature_pos=pos,
            sapo_temperature_neg=neg,
        )


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "cispo"])
@pytest.mark.parametrize("quantile", [0.2, 0.5])
def test_top_entropy_quantile_agrees_with_trl(loss_type, quantile):
    from grpo_core.algo.loss import entropy_threshold

    for seed in range(3):
        logps, old, ref, adv, mask = _batch(seed)
        entropies = torch.rand(B, T, generator=torch.Generator().manual_seed(100 + seed)) * 3
        settings = LossSettings(
            loss_type,
            beta=0.04,
            max_completion_length=T,
            epsilon_high=5.0 if loss_type == "cispo" else 0.28,
            top_entropy_quantile=quantile,
            entropy_threshold=entropy_threshold(entropies[mask.bool()], quantile),
        )
        ours, _ = grpo_loss(logps, old, ref, adv, mask, settings, entropies)
        theirs = trl_loss(
            logps,
            old,
            ref,
            adv,
            mask,
            loss_type=loss_type,
            beta=0.04,
            epsilon_high=settings.epsilon_high,
            max_completion_length=T,
            entropies=entropies,
            top_entropy_quantile=quantile,
        )
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-6, abs=1e-7)
        (ours_grad,) = torch.autograd.grad(ours, logps)
        (theirs_grad,) = torch.autograd.grad(theirs, logps)
        torch.testing.assert_close(ours_grad, theirs_grad, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("delta", [1.05, 1.5])  # 1.05 < 1 + ε_high: the bound acts on the positive side too
def test_two_sided_clip_agrees_with_trl(loss_type, delta):
    for seed in range(3):
        agree(
            LossSettings(loss_type, beta=0.04, max_completion_length=T, epsilon_high=0.28, delta=delta),
            seed,
            delta=delta,
        )


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
@pytest.mark.parametrize("quantile", [1.0, 0.5])
@pytest.mark.parametrize("accumulation", [1, 2])
def test_entropy_bonus_agrees_with_trl(loss_type, quantile, accumulation):
    # value and gradient through the log-probs and the entropies (TRL: loss − coef · masked mean H ÷ accumulation)
    from grpo_core.algo.loss import entropy_threshold

    for seed in range(3):
        logps, old, ref, adv, mask = _batch(seed)
        entropies = (torch.rand(B, T, generator=torch.Generator().manual_seed(200 + seed)) * 3).requires_grad_(True)
        settings = LossSettings(
            loss_type,
            beta=0.04,
            max_completion_length=T,
            epsilon_high=0.28,
            entropy_coef=0.01,
            top_entropy_quantile=quantile,
            gradient_accumulation_steps=accumulation,
            entropy_threshold=entropy_threshold(entropies.detach()[mask.bool()], quantile),
        )
        ours, m = grpo_loss(logps, old, ref, adv, mask, settings, entropies)
        theirs = trl_loss(
            logps,
            old,
            ref,
            adv,
            mask,
            loss_type=loss_type,
            beta=0.04,
            epsilon_high=0.28,
            max_completion_length=T,
            entropies=entropies,
            top_entropy_quantile=quantile,
            entropy_coef=0.01,
            gradient_accumulation_steps=accumulation,
        )
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-6, abs=1e-7)
        for wrt in (logps, entropies):
            (g_ours,) = torch.autograd.grad(ours, wrt, retain_graph=True)
            (g_theirs,) = torch.autograd.grad(theirs, wrt, retain_graph=True)
            torch.testing.assert_close(g_ours, g_theirs, atol=1e-7, rtol=1e-6)
