"""[Claim C2] Learning-rate schedule: linear warmup, then constant, linear or cosine decay.

The scheduler is transformers' `get_scheduler` (the schedule TRL trains with). `lr_multiplier`
writes the same shape out by hand, for the hand-computed tests: at 0-indexed optimizer step s the
multiplier is s / warmup while s < warmup, so with warmup on the first update uses lr = 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from grpo_core.util.registry import Registry

if TYPE_CHECKING:
    import torch

# lr_scheduler_type -> (transformers' scheduler name, the decay after warmup as a function of the
# progress p in [0, 1]); the allowed names are the registered ones (grpo_core/algo/axes.py)
SCHEDULERS = Registry("lr_scheduler_type")
SCHEDULERS.add("constant", ("constant_with_warmup", lambda p: 1.0), "warmup, then constant")
SCHEDULERS.add("linear", ("linear", lambda p: max(0.0, 1.0 - p)), "warmup, then linear decay to 0")
SCHEDULERS.add(
    "cosine", ("cosine", lambda p: max(0.0, 0.5 * (1.0 + math.cos(math.pi * p)))), "warmup, then cosine decay to 0"
)


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, scheduler: str) -> float:
    """Multiplier of the peak learning rate at 0-indexed optimizer step `step` (by hand)."""
    _, decay = SCHEDULERS.get(scheduler)  # ValueError naming the allowed names
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return decay((step - warmup_steps) / max(1, total_steps - warmup_steps))


def make_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, scheduler: str
) -> torch.optim.lr_scheduler.LambdaLR:
    from transformers import get_scheduler

    name, _ = SCHEDULERS.get(scheduler)
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)
