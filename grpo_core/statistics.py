"""Statistics over seeds, with never-learned runs treated as censored (not dropped), and paired
comparisons for variants that share a seed (and so share their prompts and sampling streams).

A run that never reaches the learning threshold has steps_to_learn > max_steps: right-censored
at a time every run shares. Such a value is represented as `math.inf` here: it sorts after
every observed value, so medians and bootstrap bounds can read "not learned". Paired tests
count it at the horizon (`capped`), which keeps its order and so the test's exactness.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

INF = math.inf


def median(values: Sequence[float]) -> float:
    """Median that handles inf; the mean of the two middle values when n is even
    (inf when either is inf)."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return math.nan
    if n % 2:
        return v[n // 2]
    a, b = v[n // 2 - 1], v[n // 2]
    return INF if math.isinf(a) or math.isinf(b) else (a + b) / 2


def bootstrap_median_ci(values: Sequence[float], confidence: float = 0.95, n_boot: int = 10_000,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (bounds may be inf when runs are censored)."""
    v = np.asarray(sorted(values), dtype=float)
    if len(v) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    samples = np.sort(v[rng.integers(0, len(v), size=(n_boot, len(v)))], axis=1)
    n = len(v)
    if n % 2:
        meds = samples[:, n // 2]
    else:
        lo, hi = samples[:, n // 2 - 1], samples[:, n // 2]
        with np.errstate(invalid="ignore"):
            meds = np.where(np.isinf(lo) | np.isinf(hi), np.inf, (lo + hi) / 2)
    alpha = (1 - confidence) / 2
    # "lower"/"higher" pick order statistics, so inf bounds stay inf instead of becoming nan
    return (float(np.quantile(meds, alpha, method="lower")), float(np.quantile(meds, 1 - alpha, method="higher")))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order (nan stays nan)."""
    indexed = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m = len(indexed)
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def mean_band(curves: Sequence[Sequence[float]], z: float = 1.96) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs per step and a normal 95% band (mean ± z·SE); curves are cut to the shortest."""
    length = min(len(c) for c in curves)
    arr = np.asarray([list(c)[:length] for c in curves], dtype=float)  # (runs, steps)
    mean = arr.mean(axis=0)
    if len(arr) < 2:
        return mean, mean.copy(), mean.copy()
    se = arr.std(axis=0, ddof=1) / math.sqrt(len(arr))
    return mean, mean - z * se, mean + z * se


# ---- paired comparisons (variants run on the same seeds) -------------------------------------------
def capped(values: Sequence[float], horizon: float) -> list[float]:
    """Censored runs (inf) counted at the horizon (max_steps): a monotone map, so a rank test on
    the capped values is still exact under the null, and a paired difference involving a
    censored run is a bound on the true one (its magnitude is at least the capped one)."""
    return [min(float(x), horizon) for x in values]  # (a value past a horizon shorter than max_steps: censored too)


def signed_rank_test(differences: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired differences, zeros dropped (Wilcoxon's
    convention), ties given mid-ranks, the null distribution enumerated exactly over all sign
    flips (scipy's PermutationMethod). 1.0 with fewer than 2 non-zero differences."""
    from scipy.stats import PermutationMethod, wilcoxon

    d = [x for x in differences if x != 0]
    if len(d) < 2:  # one sign flip of one pair: p = 1 exactly
        return 1.0
    return float(wilcoxon(d, zero_method="wilcox", method=PermutationMethod(n_resamples=np.inf)).pvalue)


def smallest_signed_rank_p(n_pairs: int) -> float:
    """The smallest two-sided p the signed-rank test can give on n pairs (all of one sign)."""
    return min(1.0, 2.0 / 2 ** n_pairs) if n_pairs else 1.0


def _signed_rank_null_cdf(n: int) -> np.ndarray:
    """P(T+ ≤ t) for t = 0 … n(n+1)/2 under the null (no ties): T+ sums a random subset of 1..n."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return np.cumsum(counts) / 2 ** n


def hodges_lehmann(differences: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): the median of the Walsh averages (d_i + d_j)/2, i ≤ j, with the
    distribution-free interval that inverts the exact signed-rank test (Bauer 1972): the C-th
    smallest and largest Walsh averages, C − 1 the largest t with P(T+ ≤ t) ≤ (1 − confidence)/2.
    Too few pairs for any such t give an unbounded interval (−inf, inf)."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    if n == 0:
        return math.nan, math.nan, math.nan
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2)
    estimate = float(np.median(walsh))
    cdf = _signed_rank_null_cdf(n)
    below = np.nonzero(cdf <= (1 - confidence) / 2)[0]
    if len(below) == 0:
        return estimate, -INF, INF
    c = int(below[-1]) + 1  # C: one past the largest such t
    return estimate, float(walsh[c - 1]), float(walsh[len(walsh) - c])


def friedman_test(blocks: Sequence[Sequence[float]]) -> float:
    """p-value of Friedman's test: rows are seeds (blocks), columns the levels of an axis, so
    each seed is compared with itself. Two levels: the signed-rank test. 1.0 when all tied."""
    from scipy.stats import friedmanchisquare

    arr = np.asarray(blocks, dtype=float)  # (seeds, levels)
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] < 2:
        return math.nan
    if arr.shape[1] == 2:
        return signed_rank_test(arr[:, 0] - arr[:, 1])
    if np.all(arr == arr[:, :1]):
        return 1.0
    return float(friedmanchisquare(*arr.T).pvalue)


def clopper_pearson_upper(successes: int, n: int, confidence: float = 0.95) -> float:
    """One-sided upper confidence bound of a binomial rate (exact)."""
    from scipy.stats import beta

    if n == 0:
        return math.nan
    return 1.0 if successes >= n else float(beta.ppf(confidence, successes + 1, n - successes))
