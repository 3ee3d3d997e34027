"""The variant axes in one table, in the order a step runs them.

Each row is an axis: the config keys that set it, the stage of a step where it acts, where the
code is, the claim it tests, and, for an axis whose values are names, the registry that holds the
named implementations (the allowed values are exactly the registered names). The config's
`validate` checks every named axis against its registry; the docs' variant table
(docs/concepts/grpo-math.md) is generated from this one (`python -m grpo_lab.reference_docs`).
The public spelling of keys and values is TRL's where TRL has the axis (`loss_type: cispo` means
what it means in TRL), mapped onto the registries.

Stages, in a step's order (trainer.generate_batch, then trainer.optimize):
    rewards      the reward functions' values combined into one reward per completion
    advantages   baseline -> std scaling -> noise -> scale (advantages.compute_advantages)
    groups       which groups enter the loss (zero-variance groups)
    tokens       which tokens enter the loss (the loss mask)
    loss         importance ratio -> surrogate -> aggregation (loss.grpo_loss)
    schedule     the learning rate per optimizer step; how many steps one generation batch feeds
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from grpo_core.algo.advantages import ADVANTAGE_ESTIMATORS, REWARD_SCALES, ZERO_VARIANCE_GROUPS
from grpo_core.algo.loss import IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, LOSS_TYPES, SURROGATES
from grpo_core.util.registry import Registry
from grpo_core.tasks.rewards import REWARD_AGGREGATIONS
from grpo_core.algo.schedule import SCHEDULERS

STAGES = ("rewards", "advantages", "groups", "tokens", "loss", "schedule")


@dataclass(frozen=True)
class Axis:
    name: str
    keys: tuple[str, ...]  # the config keys that set it (the first names the registry's values)
    stage: str  # one of STAGES
    where: str  # the code that acts on it
    claim: str = ""  # the claim (docs/concepts/claims.md) it tests, if any
    registry: Optional[Registry] = None  # for an axis whose values are names
    note: str = ""


AXES: tuple[Axis, ...] = (
    Axis(
        "reward weights",
        ("reward_weights",),
        "rewards",
        "rewards.combine_rewards",
        note="one weight per reward function, Σ weight × reward (TRL's)",
    ),
    Axis(
        "reward aggregation",
        ("multi_objective_aggregation",),
        "rewards",
        "rewards.REWARD_AGGREGATIONS",
        registry=REWARD_AGGREGATIONS,
    ),
    Axis(
        "overlong penalty",
        ("overlong_buffer_len", "overlong_penalty_factor"),
        "rewards",
        "rewards.overlong_penalty",
        note="DAPO's soft overlong punishment on the trained reward: 0 up to "
        "max_completion_length − buffer, then down to −factor; 0 = off",
    ),
    Axis(
        "advantage estimator",
        ("advantage_estimator",),
        "advantages",
        "advantages.ADVANTAGE_ESTIMATORS",
        registry=ADVANTAGE_ESTIMATORS,
    ),
    Axis("std scaling", ("scale_rewards",), "advantages", "advantages.REWARD_SCALES", "C5", REWARD_SCALES),
    Axis(
        "advantage noise",
        ("advantage_noise_std", "advantage_noise_steps"),
        "advantages",
        "advantages.perturb_advantages",
        "C3",
        note="N(0, std²) from its own seeded generator; 0 = off",
    ),
    Axis(
        "advantage scale",
        ("advantage_scale",),
        "advantages",
        "advantages.scale_advantages",
        "C4",
        note="× a constant after normalization and noise; 1 = off",
    ),
    Axis(
        "zero-variance groups",
        ("zero_variance_groups", "max_num_gen_batches"),
        "groups",
        "loss_masks.zero_variance_rows, trainer._resample, loss.aggregate (live_sequences)",
        "C6",
        ZERO_VARIANCE_GROUPS,
    ),
    Axis(
        "truncation masking",
        ("mask_truncated_completions",),
        "tokens",
        "loss_masks.truncated_rows",
        note="rows that did not end in EOS leave the loss (TRL's)",
    ),
    Axis(
        "entropy masking",
        ("top_entropy_quantile",),
        "tokens",
        "loss.high_entropy_mask (threshold: trainer._entropy_threshold)",
        note="only the top q of each micro-batch's tokens by entropy keep their "
        "policy loss (TRL's; arXiv 2506.01939); 1 = off",
    ),
    Axis(
        "importance ratio",
        ("importance_sampling_level",),
        "loss",
        "loss.IMPORTANCE_SAMPLING_LEVELS",
        registry=IMPORTANCE_SAMPLING_LEVELS,
    ),
    Axis(
        "loss type",
        ("loss_type", "epsilon", "epsilon_high", "delta"),
        "loss",
        "loss.LOSS_TYPES (surrogate, normalizer)",
        "C5, C1",
        LOSS_TYPES,
        note="TRL's loss_type: each value names a surrogate and a normalizer",
    ),
    Axis(
        "entropy bonus",
        ("entropy_coef",),
        "loss",
        "loss.entropy_bonus",
        note="− coef × the mean entropy of the trained tokens (TRL's); 0 = off",
    ),
    Axis(
        "KL penalty",
        ("kl_estimator", "beta", "use_bias_correction_kl", "kl_in_reward"),
        "loss",
        "loss.KL_ESTIMATORS",
        "C1",
        KL_ESTIMATORS,
        note="β · the KL estimate to the reference, aggregated as the policy loss (or, with "
        "kl_in_reward, summed per completion and taken from its reward); β 0 = no reference "
        "model",
    ),
    Axis(
        "generation reuse",
        ("num_iterations", "steps_per_generation"),
        "schedule",
        "trainer.train_step (the generation batch's slices), trainer.optimize",
        note="μ passes over each generation batch; TRL's steps_per_generation = k × gradient_accumulation_steps "
        "splits one batch of k × prompts_per_step prompts over k optimizer steps (advantages over the whole "
        "batch; the later steps off-policy, with stored old log-probs); 1 and null = one step per batch",
    ),
    Axis(
        "warmup and schedule",
        ("lr_scheduler_type", "warmup_steps", "warmup_ratio"),
        "schedule",
        "schedule.SCHEDULERS",
        "C2",
        SCHEDULERS,
    ),
)


def axis_of(key: str) -> Axis:
    """The axis whose first key is `key`."""
    return next(a for a in AXES if a.keys[0] == key)


def named_axes() -> tuple[Axis, ...]:
    """The axes whose values are names in a registry (validate checks each)."""
    return tuple(a for a in AXES if a.registry is not None)


def check(cfg) -> None:
    """Every named axis's value is a registered name, and each name's own check passes; raises
    ConfigError naming the key and what is allowed."""
    from grpo_core.util.errors import ConfigError

    for axis in named_axes():
        key = axis.keys[0]
        value = getattr(cfg, key)
        if value not in axis.registry:
            raise ConfigError(key, f"unknown value {value!r}; allowed: {', '.join(axis.registry)}")
        problem = axis.registry.checks.get(value, lambda c: None)(cfg)
        if problem:
            raise ConfigError(key, problem)


def markdown_table() -> str:
    """The docs' variant table: one row per axis, its values (and what each does) from the registry."""
    rows = ["| axis | keys | stage | values | where | claim |", "|---|---|---|---|---|---|"]
    for a in AXES:
        keys = ", ".join(f"`{k}`" for k in a.keys)
        if a.registry is not None:
            values = "; ".join(
                f"`{name}`: {a.registry.notes[name]}" if a.registry.notes[name] else f"`{name}`" for name in a.registry
            )
            values = f"{a.note + '. ' if a.note else ''}{values}"
        else:
            values = a.note
        rows.append(f"| {a.name} | {keys} | {a.stage} | {values} | `{a.where}` | {a.claim or '—'} |")
    surrogates = "; ".join(f"`{n}`: {SURROGATES.notes[n]}" for n in SURROGATES)
    return "\n".join(rows) + f"\n\nSurrogates (named by `loss_type`): {surrogates}.\n"
