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

ALPHA = 0.05  # the significance level of every test the report runs
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


def bootstrap_median_ci(
    values: Sequence[float], confidence: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float]:
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


def _doubled_midranks(a: np.ndarray) -> np.ndarray:
    """Twice the 1-based mid-ranks of `a` (ties share the mean of their ranks), as integers: a
    tie group over sorted positions i..j (1-based) gets i + j."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    bounds = np.flatnonzero(np.diff(s)) + 1
    starts, ends = np.r_[0, bounds], np.r_[bounds, len(a)]
    out = np.empty(len(a), dtype=np.int64)
    out[order] = np.repeat(starts + 1 + ends, ends - starts)
    return out


def signed_rank_test(differences: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired differences, zeros dropped (Wilcoxon's
    convention), ties given mid-ranks, the null distribution enumerated exactly over all 2^n sign
    flips (what scipy's PermutationMethod enumerates; tests/test_statistics.py checks they agree).
    The enumeration is a subset-sum count over doubled mid-ranks (integers), so n = 30 costs as
    little as n = 6: the power simulation (sweeps/deciding/power.py) calls it thousands of times.
    p = min(1, 2 · min(P(T+ ≤ t), P(T+ ≥ t))). 1.0 with fewer than 2 non-zero differences."""
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    n = len(d)
    if n < 2:  # one sign flip of one pair: p = 1 exactly
        return 1.0
    doubled = _doubled_midranks(np.abs(d))
    counts = np.zeros(int(doubled.sum()) + 1)  # counts[t]: sign patterns whose positive ranks sum to t/2
    counts[0] = 1
    for r in doubled:
        counts[r:] = counts[r:] + counts[:-r].copy()
    observed = int(doubled[d > 0].sum())
    total = 2.0**n
    low, high = counts[: observed + 1].sum() / total, counts[observed:].sum() / total
    return float(min(1.0, 2 * min(low, high)))


def signed_rank_tests(batch) -> np.ndarray:
    """signed_rank_test of each row of a (rows, n) array at once, equal to it row by row (a test
    checks): the power simulation's inner loop. Zeros get rank 0, which doubles every count of
    the row's null distribution and leaves its probabilities unchanged, as dropping them does."""
    d = np.atleast_2d(np.asarray(batch, dtype=float))
    rows, n = d.shape
    zero = d == 0
    a = np.where(zero, -1.0, np.abs(d))  # zeros sort first, as one tie group below every non-zero
    order = np.argsort(a, axis=1, kind="stable")
    s = np.take_along_axis(a, order, axis=1)
    pos = np.broadcast_to(np.arange(n), (rows, n))
    new = np.ones((rows, n), dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)  # first position of each tie group
    last = np.ones((rows, n), dtype=bool)
    last[:, :-1] = s[:, :-1] != s[:, 1:]
    end = np.minimum.accumulate(np.where(last, pos, n - 1)[:, ::-1], axis=1)[:, ::-1]  # its last position
    zeros = zero.sum(axis=1, keepdims=True)
    doubled_sorted = start + end + 2 - 2 * zeros  # twice the mid-rank among the non-zeros
    doubled = np.empty((rows, n), dtype=np.int64)
    np.put_along_axis(doubled, order, doubled_sorted, axis=1)
    doubled[zero] = 0
    top = n * (n + 1)
    counts = np.zeros((rows, top + 1))
    counts[:, 0] = 1
    grid = np.arange(top + 1)
    for j in range(n):
        idx = grid[None, :] - doubled[:, j : j + 1]
        counts = counts + np.where(idx >= 0, np.take_along_axis(counts, np.clip(idx, 0, None), axis=1), 0.0)
    total = counts.sum(axis=1)
    observed = np.where(d > 0, doubled, 0).sum(axis=1)
    cdf = np.cumsum(counts, axis=1)
    low = cdf[np.arange(rows), observed]
    high = total - np.where(observed > 0, cdf[np.arange(rows), np.maximum(observed - 1, 0)], 0.0)
    p = np.minimum(1.0, 2 * np.minimum(low, high) / total)
    return np.where((~zero).sum(axis=1) < 2, 1.0, p)


def smallest_signed_rank_p(n_pairs: int) -> float:
    """The smallest two-sided p the signed-rank test can give on n pairs (all of one sign)."""
    return min(1.0, 2.0 / 2**n_pairs) if n_pairs else 1.0


def smallest_friedman_p(n_seeds: int, levels: int) -> float:
    """The smallest p Friedman's test (friedman_test; two levels: the signed-rank test) can give on
    n seeds (every seed ranking the levels alike); 1.0 with fewer than 2 seeds."""
    return friedman_test([list(range(levels))] * n_seeds) if n_seeds >= 2 else 1.0


def _signed_rank_null_cdf(n: int) -> np.ndarray:
    """P(T+ ≤ t) for t = 0 … n(n+1)/2 under the null (no ties): T+ sums a random subset of 1..n."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return np.cumsum(counts) / 2**n


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


def _rank_sum_null_cdf(m: int, n: int) -> np.ndarray:
    """P(U ≤ u) for u = 0 … m·n under the null (no ties): U counts the pairs (x_i, y_j) with
    x_i > y_j, for m x's and n y's in random order (the Mann-Whitney statistic)."""
    # counts[k][u]: orderings of k x's among the values so far with statistic u (a recursion over the largest)
    from math import comb

    table: dict = {}

    def count(a: int, b: int) -> np.ndarray:  # a x's, b y's: number of arrangements per u = 0 … a·b
        if (a, b) in table:
            return table[(a, b)]
        if a == 0 or b == 0:
            out = np.zeros(a * b + 1)
            out[0] = 1
        else:  # the largest value is an x (it beats every y: + b) or a y (+ 0)
            out = np.zeros(a * b + 1)
            with_x, with_y = count(a - 1, b), count(a, b - 1)
            out[b : b + len(with_x)] += with_x
            out[: len(with_y)] += with_y
        table[(a, b)] = out
        return out

    return np.cumsum(count(m, n)) / comb(m + n, m)


def hodges_lehmann_two_sample(
    x: Sequence[float], y: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """(estimate, low, high) of the shift x − y between two independent samples: the median of all
    m·n differences x_i − y_j, with the distribution-free interval that inverts the exact
    Mann-Whitney test (Moses): the C-th smallest and largest differences, C − 1 the largest u with
    P(U ≤ u) ≤ (1 − confidence)/2. Too few values for any such u give (−inf, inf). With ties (step
    counts) the interval is the no-ties one, a close approximation."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) == 0 or len(y) == 0:
        return math.nan, math.nan, math.nan
    diffs = np.sort((x[:, None] - y[None, :]).ravel())
    estimate = float(np.median(diffs))
    below = np.nonzero(_rank_sum_null_cdf(len(x), len(y)) <= (1 - confidence) / 2)[0]
    if len(below) == 0:
        return estimate, -INF, INF
    c = int(below[-1]) + 1
    return estimate, float(diffs[c - 1]), float(diffs[len(diffs) - c])


def rank_sum_test(x: Sequence[float], y: Sequence[float]) -> float:
    """Two-sided Mann-Whitney (Wilcoxon rank-sum) p-value of two independent samples, ties given
    mid-ranks, by permutation: exact (every split enumerated) up to 9,999 splits, else 9,999 random
    splits from a fixed seed. 1.0 when every value is equal."""
    from scipy.stats import PermutationMethod, mannwhitneyu

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) == 0 or len(y) == 0 or np.all(np.concatenate([x, y]) == x[0]):
        return 1.0
    method = PermutationMethod(n_resamples=9999, rng=np.random.default_rng(0))
    return float(mannwhitneyu(x, y, alternative="two-sided", method=method).pvalue)


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


def friedman_tests(batch) -> np.ndarray:
    """friedman_test of each (seeds, levels) table of a (tables, seeds, levels) array at once, equal
    to it table by table (a test checks): the power simulation's inner loop for tests across
    several levels. Mid-ranks within each seed; the tie correction counts, for each value, how
    many of its seed's values equal it (a tie group of t adds t · (t² − 1), as scipy's)."""
    from scipy.stats import chi2, rankdata

    arr = np.asarray(batch, dtype=float)  # (tables, n, k)
    _, n, k = arr.shape
    if k == 2:
        return signed_rank_tests(arr[:, :, 0] - arr[:, :, 1])
    ranks = rankdata(arr, axis=2)  # (tables, n, k)
    ties = ((arr[:, :, :, None] == arr[:, :, None, :]).sum(axis=3) ** 2 - 1).sum(axis=(1, 2))  # (tables,)
    correction = 1 - ties / (k * (k * k - 1) * n)
    statistic = 12.0 / (k * n * (k + 1)) * (ranks.sum(axis=1) ** 2).sum(axis=1) - 3 * n * (k + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = chi2.sf(statistic / correction, k - 1)
    return np.where(correction > 0, p, 1.0)  # every seed tied across its levels: p = 1, as friedman_test


def clopper_pearson_upper(successes: int, n: int, confidence: float = 0.95) -> float:
    """One-sided upper confidence bound of a binomial rate (exact)."""
    from scipy.stats import beta

    if n == 0:
        return math.nan
    return 1.0 if successes >= n else float(beta.ppf(confidence, successes + 1, n - successes))


COVERAGE_EXACT_LIMIT = 400_000  # resamples enumerated exactly up to this many distinct ones (n = 8: at most 6,435)
COVERAGE_DRAWS = 400_000  # beyond it, Monte-Carlo resamples: standard error ≤ 0.0005, so a rule on it does not flip
COVERAGE_SLACK = 0.02  # a coverage this far below nominal still counts as nominal (declared with the rule, 2026-11)


def _resamples(d: np.ndarray, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct bootstrap resample of `d` (n draws with replacement) with its probability,
    as (samples (m, n), weights (m,)): the multisets of the distinct values with multinomial weights,
    exact, so a rule read from them gives one answer whatever the random stream. Where there are
    more than COVERAGE_EXACT_LIMIT multisets (n ≥ 11 or so with few ties), `draws` random resamples
    with equal weights."""
    from itertools import combinations_with_replacement
    from math import comb, lgamma

    n = len(d)
    values, counts = np.unique(d, return_counts=True)
    k = len(values)
    if comb(n + k - 1, n) > COVERAGE_EXACT_LIMIT:
        samples = d[np.random.default_rng(seed).integers(0, n, size=(draws, n))]
        return samples, np.full(draws, 1.0 / draws)
    logp = np.log(counts / n)
    picks = np.array(list(combinations_with_replacement(range(k), n)), dtype=np.int64)  # (m, n), sorted indices
    tally = np.stack([(picks == j).sum(axis=1) for j in range(k)], axis=1)  # (m, k)
    log_factorial = np.array([lgamma(c + 1) for c in range(n + 1)])
    log_weight = lgamma(n + 1) - log_factorial[tally].sum(axis=1) + (tally * logp).sum(axis=1)
    return values[picks], np.exp(log_weight)


def hodges_lehmann_coverage(
    differences: Sequence[float], confidence: float, estimand: str = "mean", draws: int = COVERAGE_DRAWS, seed: int = 0
) -> float:
    """How often the exact Hodges-Lehmann interval at `confidence` covers `estimand` ("mean" or
    "pseudo-median") when the paired differences are drawn, n at a time with replacement, from
    these differences themselves (their empirical distribution standing in for the truth; its
    pseudo-median is the median of (d_i + d_j)/2 over all n² ordered pairs). Computed exactly over
    every distinct resample where they are few enough (_resamples), so an equivalence verdict read
    from it cannot flip with a random stream (the Monte-Carlo estimate with 2,000 draws it replaced
    put C5's dapo length coverage at 0.88 on one stream and 0.875 on average). With most
    differences tied and one far out, the interval can miss the mean in every resample that leaves
    the outlier out: (1 − 1/n)^n of them, 34% at n = 8. nan with fewer than 2 differences."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    if n < 2:
        return math.nan
    truth = float(d.mean()) if estimand == "mean" else float(np.median((d[:, None] + d[None, :]) / 2))
    below = np.nonzero(_signed_rank_null_cdf(n) <= (1 - confidence) / 2)[0]
    if len(below) == 0:  # unbounded intervals cover everything
        return 1.0
    c = int(below[-1]) + 1
    samples, weights = _resamples(d, draws, seed)
    i, j = np.triu_indices(n)
    covered = np.zeros(len(weights), dtype=bool)
    for at in range(0, len(weights), 50_000):  # in blocks: (block, n(n+1)/2) Walsh averages at a time
        walsh = np.sort((samples[at : at + 50_000, i] + samples[at : at + 50_000, j]) / 2, axis=1)
        low, high = walsh[:, c - 1], walsh[:, walsh.shape[1] - c]
        covered[at : at + 50_000] = (low <= truth + 1e-12) & (truth - 1e-12 <= high)
    return float(np.sum(weights * covered) / np.sum(weights))
