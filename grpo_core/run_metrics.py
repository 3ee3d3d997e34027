"""Summary metrics of one run, computed from its per-step series (SPEC.md: Summary metrics).

Steps are 1-indexed, as in metrics.jsonl.
- steps_to_learn: first step s ≥ w whose moving average of the training reward over steps
  s−w+1..s is ≥ baseline_reward + δ; None when never reached.
- loss_departure_step: first step with |loss| > ε; None when never reached.
- final_reward: mean training reward over the last w steps (all steps if fewer).
- reward_auc: mean training reward over all steps (area under the curve per step).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing means over full windows: element k is the mean of values[k : k + window]."""
    out, running = [], 0.0
    for i, v in enumerate(values):
        running += v
        if i >= window:
            running -= values[i - window]
        if i >= window - 1:
            out.append(running / window)
    return out


def steps_to_learn(rewards: Sequence[float], baseline_reward: float, window: int = 20,
                   delta: float = 0.05) -> Optional[int]:
    threshold = baseline_reward + delta
    for k, avg in enumerate(moving_average(rewards, window)):
        if avg >= threshold - 1e-12:  # tolerate rounding in the running sum
            return k + window
    return None


def loss_departure_step(losses: Sequence[float], eps: float = 1e-3) -> Optional[int]:
    for i, loss in enumerate(losses):
        if abs(loss) > eps:
            return i + 1
    return None


def final_reward(rewards: Sequence[float], window: int = 20) -> float:
    tail = list(rewards)[-window:]
    return sum(tail) / len(tail) if tail else math.nan


def reward_auc(rewards: Sequence[float]) -> float:
    return sum(rewards) / len(rewards) if rewards else math.nan


def summarize(
    rewards: Sequence[float],
    losses: Sequence[float],
    baseline_reward: float,
    window: int,
    delta: float,
    eps: float,
) -> dict:
    stl = steps_to_learn(rewards, baseline_reward, window, delta)
    return {
        "steps_to_learn": stl,
        "learned": int(stl is not None),
        "loss_departure_step": loss_departure_step(losses, eps),
        "baseline_reward": baseline_reward,
        "final_reward": final_reward(rewards, window),
        "reward_auc": reward_auc(rewards),
    }
