"""Power of the report's paired test, by simulation: how many seeds per set a comparison needs, and
the smallest effect a set of n seeds could have detected.

The noise model is the comparison's own paired differences, centered on their Hodges-Lehmann
estimate (per seed set, then pooled), resampled with replacement: a shift model. A simulated set of
n pairs is `noise* + effect` in the claimed direction, and it counts as detected when the report's
test (sweeps.deciding.statistics.signed_rank_test: two-sided, exact) gives p < α/m with the estimate on the
claimed side, m the comparisons Holm corrects over in that test (α/m is Holm's first step, so this
is a lower bound on Holm's power for that comparison). Draws reuse one table of random indices
(common random numbers), so power rises monotonically enough in the effect for a bisection, and the
same inputs always give the same figure.

A test across several levels (Friedman's, seeds as blocks) gets the same treatment in blocks: the
noise is each seed's differences to the first level, centered per level, resampled a seed at a
time; the effect is one level shifted from the others, and the detectable shift is the largest over
which level it is.

    python -m sweeps.deciding.power RUNS_FOLDER --axis learning_rate --control 1e-4 --treatment 2e-4
prints, for a pilot sweep's runs, the seeds per set needed to detect a given effect.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Optional, Sequence

import numpy as np

from sweeps.deciding import statistics as st  # absolute: `python -m sweeps.power` runs this file too
from sweeps.deciding.statistics import ALPHA

POWER = 0.8
DRAWS = 400
SEED = 0


def centered(sets: Sequence[Sequence[float]]) -> np.ndarray:
    """Each seed set's paired differences minus their Hodges-Lehmann estimate, pooled: the noise
    the simulation resamples. Sets with no differences are skipped."""
    parts = [np.asarray(d, dtype=float) - st.hodges_lehmann(d)[0] for d in sets if len(d)]
    noise = np.concatenate(parts) if parts else np.zeros(0)
    return noise if np.all(np.isfinite(noise)) else np.zeros(0)  # a difference that is not a number: no model


def _indices(size: int, n: int, draws: int) -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, size, size=(draws, n))


def power(
    noise: np.ndarray,
    n: int,
    effect: float,
    m: int = 1,
    direction: Optional[str] = "lower",
    draws: int = DRAWS,
    alpha: float = ALPHA,
    moved: float = 1.0,
) -> float:
    """The share of simulated sets of n pairs, shifted by `effect` (≥ 0) in `direction` (lower:
    treatment − control < 0; None: either side counts), in which the test detects it. `moved` < 1:
    the effect moves each pair with that probability and leaves the rest as they were (the tied
    model: an intervention that changes some runs' learning step and not others, as step counts do),
    where 1 moves every pair at once (the constant shift)."""
    if len(noise) == 0 or n < 1:
        return 0.0
    sign = -1.0 if direction == "lower" else 1.0
    shift = sign * effect
    if moved < 1.0:  # which pairs the effect reaches: its own stream, so the resampled noise is the same
        shift = shift * (np.random.default_rng(SEED + 1).random((draws, n)) < moved)
    sets = noise[_indices(len(noise), n, draws)] + shift  # (draws, n)
    significant = st.signed_rank_tests(sets) < alpha / m
    if direction is not None:  # the report's outcome: significant with the estimate on the claimed side
        i, j = np.triu_indices(n)
        estimate = np.median((sets[:, i] + sets[:, j]) / 2, axis=1)  # Hodges-Lehmann, as st.hodges_lehmann
        significant &= estimate < 0 if direction == "lower" else estimate > 0
    return float(significant.mean())


def detectable_effect(
    noise: np.ndarray,
    n: int,
    m: int = 1,
    direction: Optional[str] = "lower",
    target: float = POWER,
    draws: int = DRAWS,
    resolution: float = 0.05,
    moved: float = 1.0,
) -> float:
    """The smallest effect (in the metric's units) detected with power ≥ `target` by n pairs (an
    effect that moves each pair with probability `moved`: see power); inf when n pairs can never
    reach p < α/m or the moved pairs are too few, nan without noise to resample."""
    if len(noise) == 0:
        return math.nan
    if st.smallest_signed_rank_p(n) >= ALPHA / m:
        return math.inf
    spread = float(np.max(noise) - np.min(noise))
    if moved < 1.0:  # tied noise has no spread, yet a partial effect is not found at every size
        spread = max(spread, 1.0)
    return _smallest_effect(
        lambda effect: power(noise, n, effect, m, direction, draws, moved=moved), spread, target, resolution
    )


def moved_share(sets: Sequence[Sequence[float]]) -> float:
    """The share of pairs whose difference is not 0 (pooled over the sets): how many pairs an
    effect like the one these runs show reaches (the tied model's `moved`)."""
    values = [v for d in sets for v in d]
    return sum(v != 0 for v in values) / len(values) if values else math.nan


def _smallest_effect(power_at, spread: float, target: float, resolution: float) -> float:
    """Bisection for the smallest effect ≥ 0 with power_at(effect) ≥ target, to resolution × the
    noise's spread; 0 where the noise has no spread (every shift at all is found once the test can
    reach significance), inf where the power never reaches the target."""
    if spread == 0:
        return 0.0
    step = max(resolution * max(spread, 1e-9), 1e-12)
    low, high = 0.0, max(spread, step)
    while power_at(high) < target:
        low, high = high, 2 * high
        if high > 1e6 * max(spread, 1.0):  # a power that never reaches the target (very few pairs)
            return math.inf
    while high - low > step:  # power(low) < target ≤ power(high)
        mid = (low + high) / 2
        if power_at(mid) >= target:
            high = mid
        else:
            low = mid
    return high


# ---- the power of the verdict itself: both seed sets significant, on step counts that tie ---------------
VERDICT_DRAWS = 4000  # simulated seed sets per power: standard error ≤ 0.008


def integer_noise(sets: Sequence[Sequence[float]]) -> np.ndarray:
    """The tied model's noise: each set's paired differences minus their Hodges-Lehmann estimate
    rounded to a whole step, pooled, so the noise stays in whole steps and keeps its ties (a shift
    model centred on a fractional estimate would turn every tie into a spread)."""
    parts = [np.asarray(d, dtype=float) - round(st.hodges_lehmann(d)[0]) for d in sets if len(d)]
    noise = np.concatenate(parts) if parts else np.zeros(0)
    return noise if np.all(np.isfinite(noise)) else np.zeros(0)


def set_power(
    noise: np.ndarray,
    n: int,
    effect: float,
    m: int = 1,
    direction: Optional[str] = "lower",
    whole_steps: bool = True,
    draws: int = VERDICT_DRAWS,
    alpha: float = ALPHA,
) -> float:
    """One seed set's chance of a significant result on the claimed side (Holm's first step over
    m comparisons) when the effect is `effect` (≥ 0) in `direction`: n pairs drawn from `noise`, each
    moved by the effect; in whole steps (`whole_steps`) each pair moves by ⌊effect⌋ or ⌈effect⌉ steps,
    the latter with the fractional part's probability (a step count moves by whole steps: the mean
    shift is the effect and the ties stay)."""
    if len(noise) == 0 or n < 1:
        return 0.0
    rng = np.random.default_rng(SEED + 7)
    sign = -1.0 if direction == "lower" else 1.0
    shift = np.full((draws, n), effect)
    if whole_steps:
        shift = np.floor(effect) + (rng.random((draws, n)) < effect - np.floor(effect))
    sets = noise[rng.integers(0, len(noise), size=(draws, n))] + sign * shift
    significant = st.signed_rank_tests(sets) < alpha / m
    if direction is not None:
        i, j = np.triu_indices(n)
        estimate = np.median((sets[:, i] + sets[:, j]) / 2, axis=1)
        significant &= estimate < 0 if direction == "lower" else estimate > 0
    return float(significant.mean())


def verdict_power(
    sets: Sequence[Sequence[float]],
    effect: float,
    m: int = 1,
    direction: Optional[str] = "lower",
    whole_steps: bool = True,
) -> float:
    """The chance that the report's verdict reads supported, both seed sets significant on the claimed
    side, when the true effect is `effect`: the product of each set's power (the sets share no seed),
    each with its own number of pairs, from the sets' pooled noise (integer_noise in whole steps,
    else `centered`)."""
    noise = integer_noise(sets) if whole_steps else centered(sets)
    out = 1.0
    for d in sets:
        out *= set_power(noise, len(d), effect, m, direction, whole_steps)
    return out


def observed_power(sets: Sequence[Sequence[float]], m: int = 1, direction: Optional[str] = "lower") -> float:
    """The verdict's power at the effect these differences show: each set's own differences
    resampled as they are (no centring, no shift), the product over the sets. The calibration of
    the tied model against the known effects (docs/concepts/verdicts.md) compares this and
    verdict_power with what the report read."""
    out = 1.0
    for d in sets:
        d = np.asarray(d, dtype=float)
        out *= set_power(d, len(d), 0.0, m, direction, whole_steps=False)
    return out


# ---- tests across several levels (Friedman's): the effect is one level shifted from the rest ----------
def centered_blocks(sets: Sequence[Sequence[Sequence[float]]]) -> np.ndarray:
    """Each seed set's (seeds, levels) table as each seed's differences to its first level, each
    level's minus their Hodges-Lehmann estimate, pooled: (seeds, levels) rows whose first column is
    0, resampled whole (a seed's levels stay together). Sets with no seeds are skipped."""
    parts = []
    for blocks in sets:
        b = np.asarray(blocks, dtype=float)
        if b.ndim == 2 and len(b):
            d = b - b[:, :1]
            parts.append(d - np.array([st.hodges_lehmann(d[:, j])[0] if j else 0.0 for j in range(d.shape[1])]))
    rows = np.concatenate(parts) if parts else np.zeros((0, 0))
    return rows if np.all(np.isfinite(rows)) else np.zeros((0, 0))  # a value that is not a number: no model


def shift_power(
    rows: np.ndarray, n: int, effect: float, level: int, m: int = 1, draws: int = DRAWS, alpha: float = ALPHA
) -> float:
    """The share of simulated tables of n seeds (rows resampled with replacement), with `level`
    shifted by `effect`, in which Friedman's test gives p < α/m (no claimed side)."""
    if len(rows) == 0 or n < 2:
        return 0.0
    tables = rows[_indices(len(rows), n, draws)]  # (draws, n, levels): a fresh array
    tables[:, :, level] += effect
    return float((st.friedman_tests(tables) < alpha / m).mean())


def detectable_shift(
    rows: np.ndarray, n: int, m: int = 1, target: float = POWER, draws: int = DRAWS, resolution: float = 0.05
) -> float:
    """The smallest shift of one level that n seeds detect with power ≥ `target`, whichever level
    it is (the largest over levels); inf when n seeds can never reach p < α/m, nan without rows."""
    if rows.size == 0:
        return math.nan
    if st.smallest_friedman_p(n, rows.shape[1]) >= ALPHA / m:
        return math.inf
    spread = float(np.max(rows[:, 1:]) - np.min(rows[:, 1:])) if rows.shape[1] > 1 else 0.0
    return max(
        _smallest_effect(
            lambda effect, lv=level: shift_power(rows, n, effect, lv, m, draws), spread, target, resolution
        )
        for level in range(rows.shape[1])
    )


TARGET_STEPS, TARGET_SHARE = 2.0, 0.15
TARGET_TEXT = f"{TARGET_STEPS:g} steps or {TARGET_SHARE:.0%} of the control's median, whichever is larger"
MOST_SEEDS = 40  # the most pairs per set seeds_needed tries


def target_effect(control_median: float) -> float:
    """The effect in steps each seed set alone should detect: 2 steps or 15% of the control arm's
    median, whichever is larger (2 where the control's median is not a number of steps)."""
    return max(TARGET_STEPS, TARGET_SHARE * control_median) if math.isfinite(control_median) else TARGET_STEPS


def seeds_needed(
    noise: np.ndarray,
    effect: float,
    m: int = 1,
    direction: Optional[str] = "lower",
    target: float = POWER,
    most: int = MOST_SEEDS,
    draws: int = DRAWS,
) -> Optional[int]:
    """The fewest pairs per set that detect `effect` with power ≥ `target` (None: more than `most`)."""
    for n in range(2, most + 1):
        if st.smallest_signed_rank_p(n) < ALPHA / m and power(noise, n, effect, m, direction, draws) >= target:
            return n
    return None


def blocks_needed(
    rows: np.ndarray, effect: float, m: int = 1, target: float = POWER, most: int = MOST_SEEDS, draws: int = DRAWS
) -> Optional[int]:
    """The fewest seeds per set that detect a shift of `effect` of any one level with power ≥
    `target` (None: more than `most`)."""
    if rows.size == 0:
        return None
    for n in range(2, most + 1):
        if st.smallest_friedman_p(n, rows.shape[1]) < ALPHA / m and all(
            shift_power(rows, n, effect, level, m, draws) >= target for level in range(rows.shape[1])
        ):
            return n
    return None


def _pilot_values(runs: str, axis: str, metric: str) -> tuple[dict, int, list[str]]:
    """Per seed, the metric at each value of `axis`, from the finished runs under `runs`; the
    horizon (the longest max_steps); and the folders left out, each with why. A UserInputError for
    what no folder can answer (no such folder, an axis no run's config has)."""
    import json
    from pathlib import Path

    import yaml

    from grpo_core.util.errors import UserInputError

    root = Path(runs)
    if not root.is_dir():
        raise UserInputError(f"{runs}: no such folder; allowed: a sweep's run folder root (one folder per trial)")
    by_seed: dict = {}
    horizon, left_out, axes = 0, [], set()
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            summary = json.loads((folder / "summary.json").read_text())
            cfg = yaml.safe_load((folder / "config.yaml").read_text())
        except FileNotFoundError as exc:
            left_out.append(f"{folder.name} (no {Path(exc.filename).name})")
            continue
        except (OSError, ValueError, yaml.YAMLError):
            left_out.append(f"{folder.name} (summary.json or config.yaml unreadable)")
            continue
        if not isinstance(summary, dict) or not isinstance(cfg, dict):
            left_out.append(f"{folder.name} (summary.json or config.yaml not a mapping)")
            continue
        if summary.get("status") != "finished":
            left_out.append(f"{folder.name} ({summary.get('status') or 'not finished'})")
            continue
        axes |= set(cfg)
        if axis not in cfg or "seed" not in cfg:
            continue
        value = summary.get(metric)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            left_out.append(f"{folder.name} ({metric} is {value!r}, not a number)")
            continue
        horizon = max(horizon, int(cfg.get("max_steps") or 0))
        by_seed.setdefault(cfg["seed"], {})[float(cfg[axis])] = math.inf if value is None else float(value)
    if axes and not by_seed:
        raise UserInputError(
            f"--axis {axis}: not a key of these runs' config.yaml; allowed: a grid axis, e.g. "
            f"{', '.join(sorted(k for k in axes if k.endswith(('rate', 'std', 'scale', 'ratio'))))}"
        )
    return by_seed, horizon, left_out


def main(argv: Optional[list[str]] = None) -> int:
    """Seeds per set for a pilot sweep's paired differences (one metric, control against treatment)."""
    from grpo_core.util.errors import UserInputError
    from sweeps.report_spec import SUMMARY_METRICS  # absolute: `python -m sweeps.power` runs this file as __main__

    parser = argparse.ArgumentParser(prog="python -m sweeps.power", description=main.__doc__)
    parser.add_argument("runs", help="a sweep's run folder root (one folder per trial)")
    parser.add_argument("--axis", required=True)
    parser.add_argument("--control", type=float, required=True)
    parser.add_argument("--treatment", type=float, required=True)
    parser.add_argument("--metric", default="steps_to_learn")
    parser.add_argument("--effect", type=float, action="append", help="effects to plan for (default: 1, 2, 3)")
    parser.add_argument("--comparisons", type=int, default=1, help="m, the comparisons Holm corrects over")
    parser.add_argument(
        "--direction",
        choices=("lower", "higher", "either"),
        default="lower",
        help="the claimed side of treatment − control, as the report's test reads it (default lower: "
        "sooner); either: no claimed side",
    )
    args = parser.parse_args(argv)

    def refuse(message: str) -> int:
        print(f"python -m sweeps.power: {message}", file=sys.stderr)
        return 2

    if args.comparisons < 1:
        return refuse(f"--comparisons {args.comparisons}; allowed: an integer ≥ 1 (the comparisons Holm corrects over)")
    if any(not math.isfinite(e) or e <= 0 for e in args.effect or []):
        return refuse(
            f"--effect {next(e for e in args.effect if not math.isfinite(e) or e <= 0)}; allowed: a number > 0"
        )
    if args.metric not in SUMMARY_METRICS:
        return refuse(f"--metric {args.metric}; allowed: {', '.join(SUMMARY_METRICS)}")
    for flag, value in (("--control", args.control), ("--treatment", args.treatment)):
        if not math.isfinite(value):
            return refuse(f"{flag} {value}; allowed: a value of the grid axis")
    try:
        by_seed, horizon, left_out = _pilot_values(args.runs, args.axis, args.metric)
    except UserInputError as exc:
        return refuse(str(exc))
    direction = None if args.direction == "either" else args.direction
    if left_out:
        print(f"left out: {'; '.join(left_out)}")
    pairs = [(v[args.treatment], v[args.control]) for v in by_seed.values() if {args.treatment, args.control} <= set(v)]
    if not pairs:
        return refuse(
            f"no seed ran both {args.axis}={args.control:g} and {args.axis}={args.treatment:g} to the end; "
            f"allowed: values of {args.axis} that finished runs used"
        )
    if all(math.isinf(x) for pair in pairs for x in pair):
        return refuse(f"no run of either arm reached {args.metric}: no differences to plan from")
    d = [min(t, horizon) - min(c, horizon) for t, c in pairs]
    noise = centered([d])
    est = st.hodges_lehmann(d)[0]
    spread = float(np.std(noise, ddof=1)) if len(noise) > 1 else 0.0
    print(f"{len(d)} pairs; paired differences {sorted(d)}; estimate {est:+.2f}; centered spread {spread:.2f}")
    if len(d) < 2 or spread == 0:
        print(
            "no noise estimate: "
            + ("one pair" if len(d) < 2 else "every pair differs alike")
            + "; the seed counts below are the fewest with which the test can reach significance at all, not a "
            "power estimate: train more pilot pairs"
        )
    for effect in args.effect or [1.0, 2.0, 3.0]:
        n = seeds_needed(noise, effect, args.comparisons, direction)
        side = "either side" if direction is None else f"estimate {direction}"
        print(
            f"effect {effect:g}: {n if n else 'more than 40'} seeds per set for {POWER:.0%} power "
            f"(two-sided p < {ALPHA / args.comparisons:g}, {side})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
