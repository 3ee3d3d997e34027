"""One generation batch as the optimizer steps consume it: what the trainer samples, scores and
normalizes (trainer.generate_batch), and what a checkpoint saves mid-batch (k × μ > 1 steps per batch).
A module of its own, so that the checkpoint and the trainer both import it and not each other."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class GenerationBatch:
    prompt_ids: torch.Tensor  # (B, P)
    prompt_mask: torch.Tensor  # (B, P)
    completion_ids: torch.Tensor  # (B, T)
    completion_mask: torch.Tensor  # (B, T)
    advantages: torch.Tensor  # (B,)
    old_logps: Optional[torch.Tensor]  # (B, T) when k × μ > 1
    ref_logps: Optional[torch.Tensor]  # (B, T) when β > 0
    metrics: dict  # reward, advantage and completion metrics of this batch
    loss_mask: Optional[torch.Tensor] = None  # (B, T) completion_mask less dropped groups, masked truncated rows
    live_sequences: Optional[list] = (
        None  # per step's slice (k), sequences left in the loss (÷ P) when groups are dropped
    )
    completions: list = dataclasses.field(default_factory=list)  # the rows completions.jsonl keeps (log_completions)

    def __post_init__(self):
        if self.loss_mask is None:
            self.loss_mask = self.completion_mask
