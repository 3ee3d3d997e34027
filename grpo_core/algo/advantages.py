"""Group-relative advantages: the estimator's baseline, the std scaling, the noise and the scale.

Pure functions: tensors in, `(advantages, metrics)` out; metrics are 0-d tensors (as loss.py's), so
the trainer copies a step's metrics to the host once. `compute_advantages` runs the stages in their
declared order (grpo_core/algo/axes.py): baseline (advantage_estimator) -> divide (scale_rewards) ->
perturb (claim C3) -> scale (claim C4). A new estimator is one function registered in
ADVANTAGE_ESTIMATORS: the config allows its name and the trainer runs it, unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpo_core.util.registry import Registry

if TYPE_CHECKING:  # torch is imported by the functions: config reads the registries' names without it
    import torch

STD_EPS = 1e-4  # TRL's denominator guard: A = (r - mean) / (std + 1e-4)

# advantage_estimator -> the baseline subtracted from each reward within its group:
# (num_groups, G) rewards -> (num_groups, G) centred rewards (what scale_rewards then divides)
ADVANTAGE_ESTIMATORS = Registry("advantage_estimator")


@ADVANTAGE_ESTIMATORS.register("grpo", "r − the group's mean (GRPO, TRL's GRPOTrainer)")
def group_mean_baseline(group_rewards: torch.Tensor) -> torch.Tensor:  # (num_groups, G) -> (num_groups, G)
    return group_rewards - group_rewards.mean(dim=1, keepdim=True)


@ADVANTAGE_ESTIMATORS.register(
    "rloo",
    "r − the mean of the group's other G − 1 rewards (RLOO, arXiv 2402.14740; "
    "TRL's RLOOTrainer, verl's rloo); = G/(G−1) × grpo's; use with scale_rewards none",
)
def leave_one_out_baseline(group_rewards: torch.Tensor) -> torch.Tensor:  # (num_groups, G) -> (num_groups, G)
    G = group_rewards.shape[1]
    others = (group_rewards.sum(dim=1, keepdim=True) - group_rewards) / (G - 1)  # each one's baseline: the rest
    return group_rewards - others


@ADVANTAGE_ESTIMATORS.register(
    "reinforce_pp",
    "r − the mean of the whole batch: a global baseline "
    "(REINFORCE++, arXiv 2501.03262; verl whitens over tokens, this over "
    "completions); use with scale_rewards batch",
)
def batch_mean_baseline(group_rewards: torch.Tensor) -> torch.Tensor:  # (num_groups, G) -> (num_groups, G)
    return group_rewards - group_rewards.mean()


@ADVANTAGE_ESTIMATORS.register(
    "grpo_passk",
    "only each group's best completion moves: r_max − r_second_max, the "
    "rest 0 (Pass@k training, arXiv 2503.19595; verl's grpo_passk)",
)
def passk_baseline(group_rewards: torch.Tensor) -> torch.Tensor:  # (num_groups, G) -> (num_groups, G)
    import torch

    top2 = group_rewards.topk(2, dim=1).values  # (num_groups, 2)
    best = group_rewards.argmax(dim=1, keepdim=True)  # (num_groups, 1) the first of tied bests
    return torch.zeros_like(group_rewards).scatter(1, best, top2[:, :1] - top2[:, 1:])


def _group_std(group_rewards: torch.Tensor) -> torch.Tensor:
    # group_rewards: (num_groups, G). Unbiased std as torch.std (and TRL) computes it.
    return group_rewards.std(dim=1, unbiased=True)


def _by_group_std(centered, group_std, batch_std):  # -> (advantages, share of zero-std completions)
    return centered / (group_std.unsqueeze(1) + STD_EPS), (group_std < 1e-8).float().mean()


def _by_batch_std(centered, group_std, batch_std):
    return centered / (batch_std + STD_EPS), (batch_std < 1e-8).float()


def _unscaled(centered, group_std, batch_std):  # Dr. GRPO
    return centered, (group_std < 1e-8).float().mean()


# [Claim C5] scale_rewards -> what divides the centred rewards
REWARD_SCALES = Registry("scale_rewards")
REWARD_SCALES.add("group", _by_group_std, "÷ (the group's std + 1e-4) (GRPO, TRL's default)")
REWARD_SCALES.add("batch", _by_batch_std, "÷ (the batch's std + 1e-4) (PPO-Lite; TRL's `batch`)")
REWARD_SCALES.add("none", _unscaled, "no division (Dr. GRPO, arXiv 2503.20783)")
SCALE_REWARDS = tuple(REWARD_SCALES)

# [Claim C6] what happens to groups whose rewards are all equal (signal_groups); the trainer's
# generate_batch and loss.aggregate (live_sequences) act on the name
ZERO_VARIANCE_GROUPS = Registry("zero_variance_groups")
ZERO_VARIANCE_GROUPS.add("keep", "keep", "in the loss with advantages 0 (TRL)")
ZERO_VARIANCE_GROUPS.add("drop", "drop", "out of the loss and its normalizer")
ZERO_VARIANCE_GROUPS.add(
    "resample",
    "resample",
    "replaced by groups from new prompts, up to max_num_gen_batches rounds (DAPO's dynamic sampling)",
)


def signal_groups(
    rewards: torch.Tensor,  # (B,) groups contiguous
    num_generations: int,  # G
) -> torch.Tensor:  # (num_groups,) bool
    """[Claim C6] Groups whose rewards are not all equal (std ≥ 1e-8, the test frac_reward_zero_std
    uses): the only groups with non-zero advantages, so the only ones with a policy gradient."""
    return _group_std(rewards.view(-1, num_generations)) >= 1e-8


def normalize_rewards(
    rewards: torch.Tensor,  # (B,) summed reward per completion, B = num_groups × G, groups contiguous
    num_generations: int,  # G
    scale_rewards: str,  # a name in REWARD_SCALES
    advantage_estimator: str = "grpo",  # a name in ADVANTAGE_ESTIMATORS
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A_i = (r_i − baseline_i) / (std + 1e-4): the estimator's baseline (grpo: the group's mean), the
    std from the group, the batch, or none.

    `none` is Dr. GRPO's choice (arXiv 2503.20783): no division by a std. A group whose rewards
    are all equal gets advantages exactly 0 in every mode (never NaN).
    """
    group_rewards = rewards.view(-1, num_generations)  # (num_groups, G)
    centered = ADVANTAGE_ESTIMATORS.get(advantage_estimator)(group_rewards)  # (num_groups, G)
    group_std = _group_std(group_rewards)  # (num_groups,)
    divide = REWARD_SCALES.get(scale_rewards)
    batch_std = rewards.std(unbiased=True) if rewards.numel() > 1 else rewards.new_zeros(())
    advantages, zero_std = divide(centered, group_std, batch_std)
    metrics = {  # names and meanings as TRL 1.16 logs them, plus the within-group std under its own name
        "reward": rewards.mean(),
        "reward_std": batch_std,  # std over the whole batch (TRL's reward_std)
        "reward_std_within_group": group_std.mean(),  # mean over groups of the group's std
        "frac_reward_zero_std": zero_std,  # share of completions whose std (group or batch) is 0
    }
    return advantages.reshape(-1), metrics


def perturb_advantages(
    advantages: torch.Tensor,  # (B,)
    noise_std: float,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """[Claim C3, TRL PR #2869] Add zero-mean Gaussian noise N(0, noise_std²); 0 = off.

    The noise comes from its own generator so turning it on does not shift the sampling stream.
    """
    if noise_std == 0:
        return advantages
    import torch

    noise = torch.randn(advantages.shape, generator=generator, dtype=torch.float32)
    return advantages + noise_std * noise.to(advantages.device, advantages.dtype)


def noise_active(step: int, noise_std: float, noise_steps: int) -> bool:
    """Noise applies at 1-indexed optimizer `step` if on and (noise_steps = 0 or step ≤ noise_steps)."""
    return noise_std > 0 and (noise_steps == 0 or step <= noise_steps)


def scale_advantages(advantages: torch.Tensor, scale: float) -> torch.Tensor:
    """[Claim C4, PR #2869 follow-up] Multiply the advantages by a constant; 1 = off."""
    return advantages if scale == 1.0 else advantages * scale


def advantage_metrics(
    advantages: torch.Tensor,  # (B,)
    num_generations: int,
) -> dict[str, torch.Tensor]:
    """`advantages/group_sum_max_abs` is 0 (to rounding) for standardized groups: claim C1's reason."""
    group_sums = advantages.view(-1, num_generations).sum(dim=1)  # (num_groups,)
    return {
        "advantages/abs_mean": advantages.abs().mean(),
        "advantages/group_sum_max_abs": group_sums.abs().max(),
    }


@dataclass(frozen=True)
class AdvantageSettings:
    """What compute_advantages reads from the config (every field is a config key)."""

    num_generations: int = 8
    advantage_estimator: str = "grpo"
    scale_rewards: str = "group"
    advantage_noise_std: float = 0.0
    advantage_noise_steps: int = 0
    advantage_scale: float = 1.0

    @classmethod
    def from_config(cls, cfg) -> "AdvantageSettings":
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})


def compute_advantages(
    rewards: torch.Tensor,  # (B,) the whole generation batch's rewards, groups contiguous
    settings: AdvantageSettings,
    step: int,  # the 1-indexed optimizer step these advantages train
    noise_generator: torch.Generator | None,
    reward: torch.Tensor
    | None = None,  # (B,) the policy's reward to log, where `rewards` is another (normalize_then_sum)
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:  # (B,), metrics
    """The advantage stages in their declared order (grpo_core/algo/axes.py): baseline and std scaling
    (normalize_rewards), noise (claim C3, while noise_active), scale (claim C4). The logged reward
    statistics are `reward`'s where it is given and differs."""
    G = settings.num_generations
    advantages, metrics = normalize_rewards(rewards, G, settings.scale_rewards, settings.advantage_estimator)
    if reward is not None and not bool((reward == rewards).all()):
        logged = normalize_rewards(reward, G, settings.scale_rewards)[1]
        metrics.update({k: logged[k] for k in ("reward", "reward_std", "reward_std_within_group")})
    if noise_active(step, settings.advantage_noise_std, settings.advantage_noise_steps):
        advantages = perturb_advantages(advantages, settings.advantage_noise_std, noise_generator)
    advantages = scale_advantages(advantages, settings.advantage_scale)
    metrics.update(advantage_metrics(advantages, G))
    return advantages, metrics
