"""Which completions of a generation batch enter the loss: the mask stages, in the order
trainer.generate_batch runs them (the `tokens` and `groups` stages of grpo_core/algo/axes.py).

Each stage is one pure function of the whole batch (every process's rows, groups contiguous):
it returns the rows it keeps in the loss, (B,) bool, or None when it is off, and its metrics.
A stage also says whether the rows it takes out still count in grpo's and dr_grpo's sequence
normalizer: a truncated completion does (TRL masks its tokens, the row stays in the mean), a
dropped group does not (it leaves the loss and its normalizer: loss.aggregate's live_sequences).
Adding a stage is one function and one row of MASK_STAGES.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from grpo_core.algo.advantages import signal_groups


@dataclass(frozen=True)
class MaskInputs:
    trained: torch.Tensor  # (B,) the rewards the advantages start from, groups contiguous
    ended: torch.Tensor  # (B,) bool: the completion ended in EOS (not cut at max_completion_length)
    groups_sampled: float  # groups sampled for this batch (more than B / G with dynamic sampling)


def truncated_rows(cfg, x: MaskInputs) -> tuple[Optional[torch.Tensor], dict]:  # (B,) bool or None
    """mask_truncated_completions (TRL's; DAPO): a completion that did not end in EOS leaves the loss."""
    return (x.ended if cfg.mask_truncated_completions else None), {}


def zero_variance_rows(cfg, x: MaskInputs) -> tuple[Optional[torch.Tensor], dict]:  # (B,) bool or None
    """[Claim C6] zero_variance_groups drop or resample: groups whose rewards are all equal (after
    resampling, those still left) leave the loss. Logged per step: groups sampled and dropped, and
    the completions generated (the batch's counts ÷ k, the optimizer steps it feeds)."""
    if cfg.zero_variance_groups == "keep":
        return None, {}
    k, G = cfg.steps_per_batch, cfg.num_generations
    signal = signal_groups(x.trained, G)  # (groups,)
    metrics = {
        "groups/sampled": x.groups_sampled / k,
        "groups/dropped": (x.groups_sampled - float(signal.sum())) / k,
        "completions/generated": x.groups_sampled * G / k,
    }
    return signal.repeat_interleave(G), metrics


@dataclass(frozen=True)
class MaskStage:
    key: str  # the config key that switches it
    stage: str  # its stage in grpo_core/algo/axes.py
    rows: Callable[..., tuple[Optional[torch.Tensor], dict]]
    counted: bool  # rows it takes out still count in the per-sequence normalizers (grpo, dr_grpo)


MASK_STAGES: tuple[MaskStage, ...] = (
    MaskStage("mask_truncated_completions", "tokens", truncated_rows, counted=True),
    MaskStage("zero_variance_groups", "groups", zero_variance_rows, counted=False),
)


def loss_rows(cfg, x: MaskInputs) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor], dict]:
    """Every stage in order: (rows in the loss, rows in the sequence normalizer, metrics), each
    (B,) bool, None where no stage took a row out."""
    in_loss = counted = None
    metrics: dict = {}
    for stage in MASK_STAGES:
        rows, m = stage.rows(cfg, x)
        metrics.update(m)
        if rows is None:
            continue
        in_loss = rows if in_loss is None else in_loss & rows
        if not stage.counted:
            counted = rows if counted is None else counted & rows
    return in_loss, counted, metrics
