"""The GRPO loss as pure functions: a registry of policy losses, the k3 KL, and the aggregation
switch, all reading one frozen `LossSettings` built once from the config.

Per token (TRL's GRPOTrainer, early 2025):
    ratio_t = exp(logp_t − old_logp_t)          (old = logp.detach() when μ = 1, so ratio = 1)
    ℓ_t     = −min(ratio_t·A_i, clip(ratio_t, 1−ε, 1+ε_high)·A_i) + β·KL_t
    KL_t    = exp(ref_t − logp_t) − (ref_t − logp_t) − 1             (k3 estimator, ≥ 0)
              (× ratio_t with use_bias_correction_kl, as TRL ≥ 1.x: the unbiased reverse-KL gradient)
The per-token losses are then aggregated by `loss_type` (claim C5). Everything returns
`(loss, metrics)`; metrics are detached 0-d tensors so the trainer decides when to sync.

Three registries (grpo_core/algo/axes.py lists them with the other axes):
    IMPORTANCE_SAMPLING_LEVELS  importance_sampling_level -> the log-ratio: per token, or per sequence
    SURROGATES                  a policy loss: (log-ratio, log-probs, advantages) -> per-token loss
    LOSS_TYPES                  loss_type (TRL's spelling) -> (its surrogate, its normalizer)
A new policy loss is one function registered in SURROGATES and one line naming it in LOSS_TYPES
(TRL spells surrogates as loss_type values: `cispo`, `sapo`), plus, when it has a knob, one field
here and in the config: the trainer only builds the settings (`LossSettings.from_config`) and
calls `grpo_loss`; the config allows every registered name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

from grpo_core.util.registry import Registry

if TYPE_CHECKING:  # torch is imported by the functions: config reads the allowed names without it
    from torch import Tensor


@dataclass(frozen=True)
class LossSettings:
    """What the loss of one micro-batch reads besides its tensors. Fields named as config keys are
    copied from the config (`from_config`); the others are derived there, or filled per step."""

    loss_type: str = "grpo"
    importance_sampling_level: str = "token"  # a name in IMPORTANCE_SAMPLING_LEVELS
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: Optional[float] = None  # None: epsilon
    delta: Optional[float] = None  # the clip surrogate's upper bound on the unclipped ratio (None: off)
    kl_estimator: str = "k3"  # a name in KL_ESTIMATORS
    kl_in_reward: bool = False  # the KL is in the reward (the trainer's): the loss only measures it
    max_completion_length: int = 8
    use_bias_correction_kl: bool = False
    sapo_temperature_pos: float = 1.0  # SAPO's gate temperature where A > 0
    sapo_temperature_neg: float = 1.05  # and where A ≤ 0
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step
    generation_batch_tokens: "Tensor | float | None" = None  # per step, dapo's normalizer (None: this micro-batch's)
    live_sequences: "Tensor | float | None" = None  # per step with dropped groups: grpo's and dr_grpo's sequence count
    top_entropy_quantile: float = 1.0  # the share of completion tokens, by entropy, whose policy loss trains
    entropy_coef: float = 0.0  # the entropy bonus's weight: loss − entropy_coef · mean entropy
    entropy_threshold: "Tensor | float | None" = None  # per micro-batch: that share's lowest entropy (the trainer's)

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @classmethod
    def from_config(cls, cfg) -> "LossSettings":
        """Every field that is a config key, from `cfg` (a GRPOConfig)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls) if hasattr(cfg, f.name)})


# kl_estimator -> the per-token estimate of KL(π_θ || π_ref) from the sampled tokens (Schulman's k1, k2, k3)
KL_ESTIMATORS = Registry("kl_estimator")


@KL_ESTIMATORS.register(
    "k3", "exp(d) − d − 1, d = ref − logp: unbiased, ≥ 0, low variance (TRL's GRPO; verl's low_var_kl)"
)
def k3_kl(
    per_token_logps: Tensor,  # (B, T) log π_θ(o_t)
    ref_per_token_logps: Tensor,  # (B, T) log π_ref(o_t)
) -> Tensor:  # (B, T)
    """k3 estimator of KL(π_θ || π_ref) per token: exp(d) − d − 1 with d = ref − logp (≥ 0)."""
    delta = ref_per_token_logps - per_token_logps
    return delta.exp() - delta - 1


@KL_ESTIMATORS.register("k1", "logp − ref: unbiased, can be negative per token (verl's kl; TRL's RLOO in the reward)")
def k1_kl(per_token_logps: Tensor, ref_per_token_logps: Tensor) -> Tensor:  # (B, T), (B, T) -> (B, T)
    return per_token_logps - ref_per_token_logps


@KL_ESTIMATORS.register(
    "k2", "(logp − ref)² / 2: biased, ≥ 0; its gradient is that of the reverse KL on-policy (verl's mse)"
)
def k2_kl(per_token_logps: Tensor, ref_per_token_logps: Tensor) -> Tensor:  # (B, T), (B, T) -> (B, T)
    return 0.5 * (per_token_logps - ref_per_token_logps) ** 2


def aggregate(
    per_token_values: Tensor,  # (B, T) one micro-batch
    completion_mask: Tensor,  # (B, T) 1 on completion tokens (through EOS), 0 on padding
    settings: LossSettings,
) -> Tensor:
    """[Claim C5, C1] This micro-batch's share of the step loss; summing the shares gives it.

    grpo    : mean over each sequence's tokens, then mean over sequences (TRL early 2025)
    bnpo    : Σ tokens / (tokens in this micro-batch)                     (TRL issue #2995)
    dapo    : Σ tokens / (tokens in the whole generation batch)          (DAPO)
    dr_grpo : Σ tokens / (sequences × max_completion_length)            (Dr. GRPO, 2503.20783)
    (a loss_type that names a surrogate uses the normalizer TRL gives it: LOSS_TYPES)
    grpo, bnpo and dr_grpo are averaged over micro-batches (÷ gradient_accumulation_steps); dapo's
    normalizer already spans them. On P processes DDP averages the gradients, so the trainer
    passes dapo the generation batch's tokens over all processes ÷ P (TRL: num_items_in_batch /
    num_processes), and the average is the one-process gradient.
    [Claim C6] With dropped groups (rows of all-zero mask) the trainer passes `live_sequences`, the
    generation batch's sequences still in the loss (÷ P as dapo's tokens): grpo and dr_grpo then
    divide by it instead of by every sequence; bnpo and dapo count tokens, so the mask suffices.
    """
    mask = completion_mask.to(per_token_values.dtype)
    return LOSS_TYPES.get(settings.loss_type).normalizer(per_token_values * mask, mask, settings)


def _count(value, like: Tensor) -> Tensor:
    """A normalizer's count (a number, or a tensor from the trainer) as a 0-d tensor like `like`, ≥ 1."""
    import torch

    return torch.as_tensor(value, dtype=like.dtype, device=like.device).clamp(min=1.0)


def _grpo(masked, mask, s: LossSettings):
    per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B,)
    if s.live_sequences is not None:  # this micro-batch's share of the mean over live sequences
        return per_seq.sum() / _count(s.live_sequences, per_seq)
    return per_seq.mean() / s.gradient_accumulation_steps


def _bnpo(masked, mask, s: LossSettings):
    return masked.sum() / mask.sum().clamp(min=1.0) / s.gradient_accumulation_steps


def _dapo(masked, mask, s: LossSettings):
    total = mask.sum() if s.generation_batch_tokens is None else s.generation_batch_tokens
    return masked.sum() / _count(total, masked)


def _dr_grpo(masked, mask, s: LossSettings):
    if s.live_sequences is not None:
        return masked.sum() / (_count(s.live_sequences, masked) * s.max_completion_length)
    return masked.sum() / (mask.shape[0] * s.max_completion_length) / s.gradient_accumulation_steps


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


# ---- importance_sampling_level -> the log-ratio and how a share of clipped entries is counted
class Level(NamedTuple):
    log_ratio: Callable[["Tensor", "Tensor", "Tensor"], "Tensor"]  # (logp, old, mask) -> (B, T) or (B, 1)
    share: Callable[["Tensor", "Tensor"], "Tensor"]  # (flags of that shape, mask (B, T)) -> 0-d


IMPORTANCE_SAMPLING_LEVELS = Registry("importance_sampling_level")


def token_log_ratio(
    per_token_logps: Tensor,  # (B, T)
    old_per_token_logps: Tensor,  # (B, T)
    completion_mask: Tensor,  # (B, T) unused: every token has its own ratio
) -> Tensor:  # (B, T)
    return per_token_logps - old_per_token_logps


def sequence_log_ratio(
    per_token_logps: Tensor,  # (B, T)
    old_per_token_logps: Tensor,  # (B, T)
    completion_mask: Tensor,  # (B, T)
) -> Tensor:  # (B, 1)
    """GSPO's length-normalized sequence log-ratio: the mean of log π_θ − log π_old over each
    sequence's completion tokens."""
    mask = completion_mask.to(per_token_logps.dtype)
    return ((per_token_logps - old_per_token_logps) * mask).sum(dim=1, keepdim=True) / mask.sum(
        dim=1, keepdim=True
    ).clamp(min=1.0)


IMPORTANCE_SAMPLING_LEVELS.add(
    "token",
    Level(token_log_ratio, lambda flags, mask: _masked_mean(flags, mask)),
    "one ratio per token (PPO, GRPO); clip_ratio: the share of tokens clipped",
)
IMPORTANCE_SAMPLING_LEVELS.add(
    "sequence",
    Level(sequence_log_ratio, lambda flags, mask: flags.mean()),
    "one ratio per sequence, the exponential of its mean token log-ratio (GSPO, "
    "arXiv 2507.18071); clip_ratio: the share of sequences clipped",
)


# ---- policy losses: (log_ratio, per_token_logps, advantages, settings) -> (per-token loss, clipped flags)
# log_ratio and the results are (B, T) at token level, (B, 1) at sequence level; advantages (B, 1)
Surrogate = Callable[["Tensor", "Tensor", "Tensor", LossSettings], "tuple[Tensor, Tensor]"]
SURROGATES = Registry("policy loss")


@SURROGATES.register(
    "clip",
    "−min(r·A, clip(r, 1−ε, 1+ε_high)·A) (PPO, GRPO); with `delta`, r bounded by delta "
    "in the first term (TRL's two-sided clip; verl's dual-clip)",
)
def clipped_surrogate(
    log_ratio: Tensor,  # (B, T) or (B, 1): log π_θ/π_old
    per_token_logps: Tensor,  # (B, T) unused: the ratio carries the gradient
    advantages: Tensor,  # (B, 1)
    settings: LossSettings,
) -> tuple[Tensor, Tensor]:
    """Per-token policy loss −min(r·A, clip(r)·A) and where clipping is active."""
    epsilon, epsilon_high = settings.epsilon, settings.clip_high
    ratio = log_ratio.exp()
    # TRL's two-sided clip (INTELLECT-2): the unclipped ratio bounded by delta, which bounds the loss of a
    # negative advantage at −delta·A (verl's dual-clip with clip_ratio_c = delta)
    unclipped = (ratio if settings.delta is None else ratio.clamp(max=settings.delta)) * advantages
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon_high) * advantages
    is_clipped = ((ratio < 1 - epsilon) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
    return -unclipped.minimum(clipped), is_clipped


@SURROGATES.register(
    "cispo",
    "−sg(min(r, ε_high))·A·log π_θ: the importance weight clipped and detached, so "
    "every token keeps a gradient (CISPO, MiniMax-M1, arXiv 2506.13585; TRL's cispo)",
)
def cispo_surrogate(
    log_ratio: Tensor,  # (B, T)
    per_token_logps: Tensor,  # (B, T) with grad: CISPO's gradient flows through log π_θ, not the ratio
    advantages: Tensor,  # (B, 1)
    settings: LossSettings,
) -> tuple[Tensor, Tensor]:
    """The REINFORCE term weighted by the importance ratio clipped from above at epsilon_high itself
    (TRL: `clamp(ratio, max=epsilon_high)`; it recommends epsilon_high 5.0, the ScaleRL paper's ε_max),
    the weight detached. Clipped: the tokens whose ratio passed epsilon_high with A > 0 (TRL's
    cispo_clip_ratio)."""
    ratio = log_ratio.exp()
    weight = ratio.clamp(max=settings.clip_high).detach()
    return -weight * advantages * per_token_logps, (ratio > settings.clip_high) & (advantages > 0)


@SURROGATES.register(
    "sapo",
    "−(4/τ)·σ(τ(r − 1))·A: a soft gate that fades the gradient as r leaves 1, instead "
    "of the hard clip; τ = sapo_temperature_pos where A > 0, sapo_temperature_neg "
    "elsewhere (SAPO, arXiv 2511.20347; TRL's sapo)",
)
def sapo_surrogate(
    log_ratio: Tensor,  # (B, T) or (B, 1)
    per_token_logps: Tensor,  # (B, T) unused: the ratio carries the gradient
    advantages: Tensor,  # (B, 1)
    settings: LossSettings,
) -> tuple[Tensor, Tensor]:
    """At r = 1 the loss is −(2/τ)·A and its gradient that of the unclipped surrogate (σ'(0)·4 = 1);
    the gate's slope σ'(τ(r−1))·4 falls off as r moves away, faster for a larger τ. Nothing is
    clipped (no flags)."""
    import torch

    ratio = log_ratio.exp()
    tau = torch.where(advantages > 0, settings.sapo_temperature_pos, settings.sapo_temperature_neg)  # (B, 1)
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    return -gate * advantages, torch.zeros_like(ratio, dtype=torch.bool)


# loss_type -> the surrogate it trains and the normalizer that aggregates it (TRL 1.16's pairing)
class LossType(NamedTuple):
    surrogate: str  # a name in SURROGATES
    normalizer: Callable  # (masked (B, T), mask (B, T), settings) -> this micro-batch's share


def _token_level_only(loss_type: str):
    def check(cfg) -> Optional[str]:
        if cfg.importance_sampling_level != "token":
            return (
                f"got {loss_type} with importance_sampling_level {cfg.importance_sampling_level!r}; allowed: "
                f"{loss_type} with importance_sampling_level token (TRL refuses the pair too)"
            )
        return None

    return check


LOSS_TYPES = Registry("loss_type")
LOSS_TYPES.add(
    "grpo",
    LossType("clip", _grpo),
    "[C5, C1] clipped surrogate; per-sequence token mean, then the mean over sequences (TRL, early 2025)",
)
LOSS_TYPES.add("bnpo", LossType("clip", _bnpo), "[C5] clipped surrogate; token mean over the micro-batch")
LOSS_TYPES.add(
    "dapo",
    LossType("clip", _dapo),
    "[C5] clipped surrogate; token mean over the generation batch (DAPO; TRL 1.16's default)",
)
LOSS_TYPES.add(
    "dr_grpo",
    LossType("clip", _dr_grpo),
    "[C5] clipped surrogate; token sum ÷ (sequences × max_completion_length) (Dr. GRPO)",
)
LOSS_TYPES.add(
    "cispo",
    LossType("cispo", _dapo),
    "CISPO surrogate; token mean over the generation batch (as TRL); TRL recommends epsilon_high 5.0",
    check=_token_level_only("cispo"),
)
LOSS_TYPES.add(
    "sapo", LossType("sapo", _grpo), "SAPO's soft gate; per-sequence token mean, then the mean over sequences (as TRL)"
)


def entropy_threshold(
    entropies: Tensor,  # (N,) the entropies of every completion token of a micro-batch (every process's)
    top_entropy_quantile: float,  # q in (0, 1]
) -> Tensor:  # 0-d
    """The (1 − q) quantile of the tokens' entropies (torch.quantile, linear interpolation, as TRL):
    the tokens at or above it are the top q share."""
    import torch

    return torch.quantile(entropies.float(), 1 - top_entropy_quantile)


def high_entropy_mask(
    entropies: Tensor,  # (B, T)
    completion_mask: Tensor,  # (B, T)
    threshold: "Tensor | float",
) -> Tensor:  # (B, T) bool
    """[top_entropy_quantile; "Beyond the 80/20 rule", arXiv 2506.01939] The completion tokens whose
    entropy is at least the threshold (TRL's get_high_entropy_mask)."""
    return ((entropies * completion_mask.to(entropies.dtype)) >= threshold) & completion_mask.bool()


def policy_loss(
    per_token_logps: Tensor,  # (B, T) with grad
    old_per_token_logps: Tensor,  # (B, T) detached
    advantages: Tensor,  # (B,)
    completion_mask: Tensor,  # (B, T)
    settings: LossSettings,
    entropies: Tensor | None = None,  # (B, T) no grad; needed when top_entropy_quantile < 1
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss_type's surrogate at the importance_sampling_level's ratio, aggregated by the
    loss_type's normalizer. At sequence level every token of a sequence carries its sequence's loss
    (loss_type grpo then gives GSPO's per-sequence objective; TRL's importance_sampling_level).
    With top_entropy_quantile < 1 only the high-entropy tokens keep their policy loss; the
    normalizer still counts every completion token (TRL)."""
    level = IMPORTANCE_SAMPLING_LEVELS.get(settings.importance_sampling_level)
    surrogate = SURROGATES.get(LOSS_TYPES.get(settings.loss_type).surrogate)
    log_ratio = level.log_ratio(per_token_logps, old_per_token_logps, completion_mask)  # (B, T) or (B, 1)
    per_token, flags = surrogate(log_ratio, per_token_logps, advantages.unsqueeze(1), settings)
    per_token = per_token.expand_as(per_token_logps)
    metrics = {"clip_ratio": level.share(flags.float(), completion_mask)}
    if settings.top_entropy_quantile < 1.0:
        if entropies is None or settings.entropy_threshold is None:
            raise ValueError("top_entropy_quantile < 1 needs the tokens' entropies and the micro-batch's threshold")
        high = high_entropy_mask(entropies.detach(), completion_mask, settings.entropy_threshold)  # (B, T)
        per_token = per_token * high.to(per_token.dtype)
        metrics["entropy_mask_share"] = _masked_mean(high.float(), completion_mask)
    return aggregate(per_token, completion_mask, settings), metrics


def importance_weights(
    per_token_logps: Tensor, old_per_token_logps: Tensor, completion_mask: Tensor, settings: LossSettings
) -> Tensor:  # (B, T) or (B, 1)
    """π_θ/π_old at the policy loss's level (TRL weights the KL by the same coefficient)."""
    level = IMPORTANCE_SAMPLING_LEVELS.get(settings.importance_sampling_level)
    return level.log_ratio(per_token_logps, old_per_token_logps, completion_mask).exp()


def grpo_loss(
    per_token_logps: Tensor,  # (B, T) with grad
    old_per_token_logps: Tensor | None,  # (B, T) or None (μ = 1: logp.detach())
    ref_per_token_logps: Tensor | None,  # (B, T) or None (β = 0)
    advantages: Tensor,  # (B,)
    completion_mask: Tensor,  # (B, T)
    settings: LossSettings,
    entropies: Tensor | None = None,  # (B, T) no grad: for top_entropy_quantile < 1
) -> tuple[Tensor, dict[str, Tensor]]:
    """The GRPO loss of one micro-batch; loss = policy_loss + kl_loss − entropy_bonus exactly (the
    bonus: 0 unless entropy_coef). `use_bias_correction_kl`: the KL term is weighted per token by
    the ratio π_θ/π_old (TRL's use_bias_correction_kl); its value is unchanged on-policy, its
    gradient becomes logp − ref."""
    if old_per_token_logps is None:
        old_per_token_logps = per_token_logps.detach()
    policy, metrics = policy_loss(
        per_token_logps, old_per_token_logps, advantages, completion_mask, settings, entropies
    )
    if settings.beta != 0.0:
        if ref_per_token_logps is None:
            raise ValueError("beta > 0 needs ref_per_token_logps")
        kl = KL_ESTIMATORS.get(settings.kl_estimator)(per_token_logps, ref_per_token_logps)  # (B, T)
        weighted = (
            kl * importance_weights(per_token_logps, old_per_token_logps, completion_mask, settings)
            if settings.use_bias_correction_kl
            else kl
        )  # (B, T)
        kl_loss = (
            policy.new_zeros(())
            if settings.kl_in_reward
            else aggregate(settings.beta * weighted, completion_mask, settings)
        )
        kl_mean = _masked_mean(weighted.detach(), completion_mask)  # as TRL logs it (after the weighting)
    else:
        kl_loss = policy.new_zeros(())
        kl_mean = policy.new_zeros(())
    loss = policy + kl_loss
    if settings.entropy_coef != 0.0:
        bonus = entropy_bonus(entropies, completion_mask, settings)
        loss = loss - bonus / settings.gradient_accumulation_steps
        metrics["entropy_bonus"] = bonus.detach()
    return loss, {"policy_loss": policy.detach(), "kl_loss": kl_loss.detach(), "kl": kl_mean, **metrics}


def entropy_bonus(
    entropies: Tensor | None,  # (B, T) with grad
    completion_mask: Tensor,  # (B, T)
    settings: LossSettings,
) -> Tensor:  # 0-d
    """[entropy_coef, TRL's] entropy_coef × the mean entropy over the completion tokens the policy
    loss trains (the top_entropy_quantile share when < 1), a mean per micro-batch whatever the
    loss_type's normalizer; the loss subtracts it ÷ gradient_accumulation_steps, as TRL does."""
    if entropies is None:
        raise ValueError("entropy_coef ≠ 0 needs the tokens' entropies")
    mask = completion_mask.to(entropies.dtype)
    if settings.top_entropy_quantile < 1.0:
        mask = mask * high_entropy_mask(entropies.detach(), completion_mask, settings.entropy_threshold).to(mask.dtype)
    return settings.entropy_coef * (entropies * mask).sum() / mask.sum().clamp(min=1.0)
