"""Summary metrics of one run, computed from its per-step series (README: Metrics).

Steps are 1-indexed, as in metrics.jsonl. With b = baseline_reward, w = stl_window, δ = stl_delta:
- moving average MA(s): mean training reward over the full window of steps s−w+1..s (s ≥ w, so
  steps_to_learn is never below w: the floor, stated beside every value in the report);
- steps_to_learn: the first step s with MA(s) ≥ b + δ from which the rise is sustained: MA stays
  ≥ b + δ/2 at every later step to the end of the run, and at least w steps follow s (so the
  last w steps of a run only confirm). None when there is no such step. A run that crosses and
  then falls back (a collapse, or noise) has not learned;
- loss_departure_step: first step with |loss| > ε; None when never reached;
- final_reward: mean training reward over the last w steps (all steps if fewer);
- reward_auc: mean training reward over all steps (area under the curve per step).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

# None when never reached: right-censored at max_steps (completions_to_learn: at completions_generated)
CENSORED = ("steps_to_learn", "loss_departure_step", "completions_to_learn")
SUSTAIN_FRACTION = 0.5  # after the crossing, MA must stay ≥ b + SUSTAIN_FRACTION·δ (hysteresis)
_TOL = 1e-12  # rounding in the running sums


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


def trailing_average(values: Sequence[float], window: int) -> list[float]:
    """Element s−1 is the mean of values over steps max(1, s−w+1)..s: one value per step."""
    out, running = [], 0.0
    for i, v in enumerate(values):
        running += v
        if i >= window:
            running -= values[i - window]
        out.append(running / min(i + 1, window))
    return out


def steps_to_learn(
    rewards: Sequence[float], baseline_reward: float, window: int = 20, delta: float = 0.05
) -> Optional[int]:
    """First step of a sustained rise to baseline + δ (module docstring); None when never."""
    ma = moving_average(rewards, window)  # ma[k] ends at step k + window
    last = len(rewards) - window  # the latest step that still has w steps after it
    threshold, floor = baseline_reward + delta, baseline_reward + SUSTAIN_FRACTION * delta
    answer, suffix_ok = None, True
    for k in range(len(ma) - 1, -1, -1):  # from the end: suffix_ok = every MA from here on is ≥ floor
        suffix_ok = suffix_ok and ma[k] >= floor - _TOL
        if not suffix_ok:
            break
        if k + window <= last and ma[k] >= threshold - _TOL:
            answer = k + window
    return answer


def first_crossing_step(
    rewards: Sequence[float], baseline_reward: float, window: int = 20, delta: float = 0.05
) -> Optional[int]:
    """The first version of steps_to_learn: the first full window reaching baseline + δ, with no
    check that the rise lasts. Kept to show, on placebo runs, what the sustained rule prevents."""
    for k, avg in enumerate(moving_average(rewards, window)):
        if avg >= baseline_reward + delta - _TOL:
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
    out = {
        "steps_to_learn": stl,
        "learned": int(stl is not None),
        "loss_departure_step": loss_departure_step(losses, eps),
        "baseline_reward": baseline_reward,
        "final_reward": final_reward(rewards, window),
        "reward_auc": reward_auc(rewards),
    }
    if stl is None:
        out["steps_to_learn_reason"] = unreached_reason(len(rewards), window)
    return out


def completion_counts(generated: Sequence[float], steps_to_learn: Optional[int]) -> dict:
    """[Claim C6] Completions sampled over the run, and up to steps_to_learn (None when never):
    dynamic sampling buys its steps with generation, so a claim about it counts both."""
    return {
        "completions_generated": int(sum(generated)),
        "completions_to_learn": None if steps_to_learn is None else int(sum(generated[:steps_to_learn])),
    }


def censored_at(key: str, summary: dict, max_steps: int) -> float:
    """Where a censored metric that was not reached is counted (MLflow, an Optuna objective):
    past the run's horizon, max_steps steps or the completions it generated."""
    if key == "completions_to_learn":
        return float(summary.get("completions_generated", 0))
    return float(max_steps)


def unreached_reason(steps: int, window: int) -> str:
    """Why a run has no steps_to_learn (summary.json, the note `grpo train` prints)."""
    if steps < 2 * window:
        fix = (
            f"set stl_window ≤ {steps // 2} for this run" if steps >= 2 else "train at least 2 steps"
        )  # stl_window is at least 1: a 1-step run cannot have one
        return (
            f"cannot be reached in {steps} steps: it needs a full window of stl_window = {window} steps and as "
            f"many after it ({2 * window} steps; {fix})"
        )
    return "the reward's moving average never rose to baseline + δ and stayed there to the end of the run"
