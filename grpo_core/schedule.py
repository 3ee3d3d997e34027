"""[Claim C2] Learning-rate schedule: linear warmup, then constant, linear or cosine decay.

Same shape as transformers' `get_*_schedule_with_warmup`: at 0-indexed optimizer step s the
multiplier is s / warmup while s < warmup, so with warmup on the first update uses lr = 0.
"""

from __future__ import annotations

import math

import torch


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, scheduler: str) -> float:
    """Multiplier of the peak learning rate at 0-indexed optimizer step `step`."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    if scheduler == "constant":
        return 1.0
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    if scheduler == "linear":
        return max(0.0, 1.0 - progress)
    if scheduler == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"lr_scheduler_type: unknown value {scheduler!r}; allowed: constant, linear, cosine")


def make_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, scheduler: str
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, warmup_steps, total_steps, scheduler)
    )
