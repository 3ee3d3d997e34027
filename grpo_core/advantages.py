"""Group-relative advantages and the two advantage variant axes (noise, scale).

Pure functions: tensors in, `(advantages, metrics)` out; metrics are 0-d tensors (as loss.py's), so
the trainer copies a step's metrics to the host once. Order in the trainer:
normalize (scale_rewards) -> perturb (claim C3) -> scale (claim C4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported by the functions: config reads SCALE_REWARDS without it
    import torch

STD_EPS = 1e-4  # TRL's denominator guard: A = (r - mean) / (std + 1e-4)


def _group_std(group_rewards: torch.Tensor) -> torch.Tensor:
    # group_rewards: (num_groups, G). Unbiased std as torch.std (and TRL) computes it.
    return group_rewards.std(dim=1, unbiased=True)


def _by_group_std(centered, group_std, batch_std):  # -> (advantages, share of zero-std completions)
    return centered / (group_std.unsqueeze(1) + STD_EPS), (group_std < 1e-8).float().mean()


def _by_batch_std(centered, group_std, batch_std):
    return centered / (batch_std + STD_EPS), (batch_std < 1e-8).float()


def _unscaled(centered, group_std, batch_std):  # Dr. GRPO
    return centered, (group_std < 1e-8).float().mean()


# [Claim C5] scale_rewards -> what divides (r − group mean); the one list of allowed names
REWARD_SCALES = {"group": _by_group_std, "batch": _by_batch_std, "none": _unscaled}
SCALE_REWARDS = tuple(REWARD_SCALES)

# [Claim C6] what happens to groups whose rewards are all equal (signal_groups): kept (TRL), dropped
# from the loss and its normalizer, or replaced by resampling (DAPO's dynamic sampling)
ZERO_VARIANCE_GROUPS = ("keep", "drop", "resample")


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
    scale_rewards: str,  # a key of REWARD_SCALES
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A_i = (r_i − mean_group(r)) / (std + 1e-4), with std from the group, the batch, or none.

    `none` is Dr. GRPO's choice (arXiv 2503.20783): no division by a std. A group whose rewards
    are all equal gets advantages exactly 0 in every mode (never NaN).
    """
    group_rewards = rewards.view(-1, num_generations)  # (num_groups, G)
    group_mean = group_rewards.mean(dim=1, keepdim=True)  # (num_groups, 1)
    centered = group_rewards - group_mean  # (num_groups, G)
    group_std = _group_std(group_rewards)  # (num_groups,)
    if scale_rewards not in REWARD_SCALES:
        raise ValueError(f"scale_rewards: unknown value {scale_rewards!r}; allowed: {', '.join(SCALE_REWARDS)}")
    batch_std = rewards.std(unbiased=True) if rewards.numel() > 1 else rewards.new_zeros(())
    advantages, zero_std = REWARD_SCALES[scale_rewards](centered, group_std, batch_std)
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
