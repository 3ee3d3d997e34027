"""A claim trained until it is decided: a group-sequential paired test whose error rate holds
under repeated looks.

A spec declares its looks (pairs per seed set at which its tests are read, the last one its
budget) and how α is spent across them (`report.sequential`, sweeps/report_spec.py). At look k
with n_k pairs, the signed-rank statistic of the first n_k paired differences,

    Z_k = Σ_i sign(d_i) · r_i / √(Σ_i r_i²)      (r_i: mid-ranks of |d_i| among the first n_k, zeros 0)

is compared with a boundary b_k. The boundaries come from the statistic's own null, not a normal
approximation: under the null of a difference symmetric about 0, every sign pattern of the
observed |d| is equally likely, so flipping signs gives the joint distribution of Z_1 … Z_k
across looks (a conditional permutation; exact, all 2^n patterns, up to EXACT_PAIRS pairs, else
FLIPS patterns drawn with a fixed seed). Each b_k is the smallest boundary at which the chance of
crossing at any look up to k stays within the α the spending function allows by then, α(t_k)
with t_k = n_k / budget (Lan-DeMets, so looks need not be equally spaced):

    O'Brien-Fleming type:  α(t) = 2 − 2 Φ(z_{1−α/2} / √t)      (spends little early; the default)
    Pocock type:           α(t) = α · ln(1 + (e − 1) t)

Equivalence within a declared margin m is two one-sided tests with boundaries of their own:
d − m significantly below 0 and d + m significantly above, each at α spent the same way.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from . import statistics as st

SPENDING = ("obrien_fleming", "pocock")
EXACT_PAIRS = 16  # up to this many pairs every sign pattern is enumerated (65,536 of them)
FLIPS = 100_000  # sign patterns drawn above it (a fixed seed: the same boundaries on every machine)
SEED = 20261207


def spent(alpha: float, t: float, kind: str) -> float:
    """The α spent by information fraction t ∈ (0, 1] (Lan-DeMets): α(1) = α."""
    if kind not in SPENDING:
        raise ValueError(f"spending {kind!r}; allowed: {', '.join(SPENDING)}")
    t = min(1.0, max(t, 0.0))
    if t == 0:
        return 0.0
    if kind == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    from scipy.stats import norm

    return 2 * float(norm.sf(norm.isf(alpha / 2) / math.sqrt(t)))


def _midranks(a: np.ndarray) -> np.ndarray:
    """1-based mid-ranks of |a| among its non-zero values (statistics' doubled mid-ranks, halved), zeros
    ranked 0 (they carry no sign)."""
    out = np.zeros(len(a))
    nonzero = np.flatnonzero(a != 0)
    if len(nonzero):
        out[nonzero] = st._doubled_midranks(np.abs(a[nonzero])) / 2
    return out


def z_statistic(d: Sequence[float]) -> float:
    """Z of the signed-rank statistic of `d` (0 when every difference is 0)."""
    a = np.asarray(d, dtype=float)
    r = _midranks(a)
    scale = math.sqrt(float((r**2).sum()))
    return float((np.sign(a) * r).sum() / scale) if scale else 0.0


def _sign_patterns(n: int, flips: int = FLIPS) -> np.ndarray:
    """(patterns, n) of ±1: all 2^n up to EXACT_PAIRS, else `flips` drawn with SEED."""
    if n <= EXACT_PAIRS:
        return _all_patterns(n)
    return np.random.default_rng(SEED).choice((-1.0, 1.0), size=(flips, n))


@functools.lru_cache(maxsize=EXACT_PAIRS + 1)
def _all_patterns(n: int) -> np.ndarray:
    return np.array(list(itertools.product((-1.0, 1.0), repeat=n)))


def boundaries(
    d: Sequence[float],
    looks: Sequence[int],
    budget: int,
    alpha: float,
    kind: str,
    side: str = "two",
    flips: int = FLIPS,
) -> list[float]:
    """b_1 … b_k for the looks reached by the |d| observed (looks[j] ≤ len(d)): side "two" rejects
    |Z_j| ≥ b_j, "upper" Z_j ≥ b_j, "lower" Z_j ≤ −b_j. inf where no boundary keeps the error
    within what may be spent by then (too few pairs)."""
    a = np.abs(np.asarray(d, dtype=float))
    reached = [n for n in looks if n <= len(a)]
    if not reached:
        return []
    patterns = _sign_patterns(reached[-1], flips)
    crossed = np.zeros(len(patterns), dtype=bool)
    out = []
    for n in reached:
        r = _midranks(a[:n])
        scale = math.sqrt(float((r**2).sum()))
        z = patterns[:, :n] @ r / scale if scale else np.zeros(len(patterns))
        stat = np.abs(z) if side == "two" else (z if side == "upper" else -z)
        allowed = spent(alpha, n / budget, kind) * len(patterns) + 1e-9  # crossings the spending allows
        left = allowed - crossed.sum()
        rest = np.sort(stat[~crossed])
        values = np.unique(np.round(rest, 12))
        new = len(rest) - np.searchsorted(rest, values - 1e-12, side="left")  # crossings at each boundary
        fits = np.flatnonzero(new <= left)  # the smallest boundary whose new crossings fit in what is left
        # a hair below the attainable value it is (the statistic's rounding must not decide a crossing)
        bound = float(values[fits[0]]) - 1e-9 if len(fits) and values[fits[0]] > 0 else math.inf
        out.append(bound)
        if math.isfinite(bound):
            crossed |= stat >= bound
    return out


@dataclass
class SequentialResult:
    outcome: str  # "effect", "equivalent", "undecided" (budget spent), or "continue" (next look)
    look: Optional[int]  # the 1-based look it stopped at, or the last look read
    pairs: int  # pairs read at that look
    z: float  # the statistic there (the effect's; for equivalence the nearer one-sided one)
    boundary: float  # the boundary it crossed, or that look's
    spent: float  # α spent by that look

    def text(self) -> str:
        if self.outcome == "continue" and math.isinf(self.boundary):
            return (
                f"open at look {self.look} ({self.pairs} pairs): Z {self.z:+.2f}; no boundary there (the α spent by "
                f"then, {self.spent:.2g}, is below what {self.pairs} pairs can reach)"
            )
        if self.outcome == "continue":
            return f"open at look {self.look} ({self.pairs} pairs): |Z| {abs(self.z):.2f} < {self.boundary:.2f}"
        if self.outcome == "undecided":
            return f"undecided at {self.pairs} pairs (budget spent)"
        return (
            f"{self.outcome} at look {self.look} ({self.pairs} pairs): Z {self.z:+.2f} against ±{self.boundary:.2f}, "
            f"α spent {self.spent:.4f}"
        )


def decide(
    d: Sequence[float],
    looks: Sequence[int],
    alpha: float = 0.05,
    kind: str = "obrien_fleming",
    margin: Optional[float] = None,
    flips: int = FLIPS,
) -> SequentialResult:
    """Read the paired differences `d` (in pair order: the first n_k make look k) at each look
    reached, in order, and stop at the first boundary crossed: an effect (two-sided), or, with a
    margin, equivalence (both one-sided tests against ±margin crossing at that look)."""
    d = np.asarray(d, dtype=float)
    budget = looks[-1]
    two = boundaries(d, looks, budget, alpha, kind, flips=flips)
    if margin is not None:
        low = boundaries(d - margin, looks, budget, alpha, kind, side="lower", flips=flips)
        high = boundaries(d + margin, looks, budget, alpha, kind, side="upper", flips=flips)
    result = None
    for k, n in enumerate(looks[: len(two)]):
        z = z_statistic(d[:n])
        result = SequentialResult("continue", k + 1, n, z, two[k], spent(alpha, n / budget, kind))
        if abs(z) >= two[k]:
            result.outcome = "effect"
            return result
        if margin is not None:
            z_low, z_high = z_statistic(d[:n] - margin), z_statistic(d[:n] + margin)
            if -z_low >= low[k] and z_high >= high[k]:
                return SequentialResult(
                    "equivalent", k + 1, n, min(-z_low, z_high), max(low[k], high[k]), spent(alpha, n / budget, kind)
                )
    if result is None:
        return SequentialResult("continue", None, len(d), 0.0, math.inf, 0.0)
    if result.pairs >= budget:
        result.outcome = "undecided"
    return result


SPENDING_NAMES = {"obrien_fleming": "O'Brien-Fleming", "pocock": "Pocock"}


DECIDED = ("effect", "equivalent")


def _design(design: dict) -> tuple[list, str, float]:
    """(looks, spending, α) of a declared `report.sequential`, its defaults filled."""
    return design["looks"], design.get("spending", "obrien_fleming"), design.get("alpha", 0.05)


def set_readings(design: dict, comparisons: list, margin: Optional[float]) -> list[SequentialResult]:
    """Each comparison of one seed set (its paired differences, `diffs`) read under the design, α
    split evenly over them (Bonferroni: the fixed design's Holm has no sequential form here)."""
    looks, kind, alpha = _design(design)
    return [decide(c.diffs or [], looks, alpha / len(comparisons), kind, margin) for c in comparisons]


def reading_text(result: SequentialResult, looks: Sequence[int]) -> str:
    """A reading in words; one with fewer pairs than the first look says so."""
    if result.look is None:
        return f"before its first look ({result.pairs} of {looks[0]} pairs)"
    return result.text()


def test_reading(design: dict, found: list, margin: Optional[float]) -> str:
    """Where one paired test stands under the design, over every seed set and comparison, for the
    summary tables and the forest plot: "decided at look k (n pairs)" once every reading crossed a
    boundary (k the latest: supported still needs both sets), "undecided at n pairs (budget spent)"
    where the budget ended one, else "open at look k (n pairs)", k the earliest still open."""
    looks = _design(design)[0]
    readings = [
        r for f in found for r in set_readings(design, f.verdict.comparisons or [], margin) if f.verdict.comparisons
    ]
    if not readings:
        return ""
    if all(r.outcome in DECIDED for r in readings):
        last = max(readings, key=lambda r: r.pairs)
        return f"decided at look {last.look} ({last.pairs} pairs)"
    if any(r.outcome == "undecided" for r in readings) and not any(r.outcome == "continue" for r in readings):
        return f"undecided at {max(r.pairs for r in readings)} pairs (budget spent)"
    first = min((r for r in readings if r.outcome == "continue"), key=lambda r: r.pairs)
    if first.look is None:
        return f"before its first look ({first.pairs} of {looks[0]} pairs)"
    return f"open at look {first.look} ({first.pairs} pairs)"


def sequential_lines(design: dict, found: list, margin: Optional[float]) -> list[str]:
    """The report's reading of one paired test under the spec's declared sequential design: per seed
    set and comparison, the look it stopped at with its statistic, boundary and α spent, or where it
    stands (set_readings). `found`: the test's SetResults (sweeps/deciding/replication.py)."""
    looks, kind, alpha = _design(design)
    lines = [
        f"Sequential reading (declared: looks at {', '.join(map(str, looks))} pairs per seed set, the last the "
        f"budget; {SPENDING_NAMES[kind]} spending of α = {alpha:g} over each test's comparisons"
        + (f"; equivalence within ±{margin:g} by two one-sided tests" if margin is not None else "")
        + "):",
        "",
    ]
    for f in found:
        comparisons = f.verdict.comparisons or []
        for c, r in zip(comparisons, set_readings(design, comparisons, margin)):
            lines.append(f"- {f.name}, {c.label}: {reading_text(r, looks)}")
    return lines + [""]


def sign_e_process(d: Sequence[float], alpha: float, budget: int) -> tuple[bool, int]:
    """An anytime-valid alternative to the looks, for comparison (sequential_sim): a two-sided sign
    test by betting. Under the null of a difference symmetric about 0 each non-zero difference's sign
    is a fair ±1 given its size, so the wealth Π (1 + λ_i · sign(d_i)), with λ_i the mean of the signs
    before pair i clipped to [−½, ½] (aGRAPA; predictable, so the wealth is a test martingale), passes
    1/α with probability at most α at any pair (Ville). Returns (whether it passed 1/α, the pairs read
    when it stopped, else all of them up to the budget)."""
    wealth, signs, lam = 1.0, [], 0.0
    d = list(d)[:budget]
    for i, x in enumerate(np.sign(d), 1):
        if x == 0:
            continue
        wealth *= 1 + lam * x
        if wealth >= 1 / alpha:
            return True, i
        signs.append(x)
        lam = max(-0.5, min(0.5, float(np.mean(signs))))
    return False, len(d)
