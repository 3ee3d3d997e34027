"""Statistics on hand-made data with known answers, and agreement with scipy."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import friedmanchisquare, rankdata, wilcoxon

from sweeps.deciding.statistics import (
    INF,
    bootstrap_median_ci,
    capped,
    clopper_pearson_upper,
    friedman_test,
    hodges_lehmann,
    holm,
    mean_band,
    median,
    signed_rank_test,
    smallest_signed_rank_p,
)


def test_median_with_censored_runs():
    assert median([30, 10, 20]) == 20
    assert median([10, 20, 30, 40]) == 25
    assert median([10, INF, INF]) == INF  # most runs never learned
    assert median([10, 20, INF, INF]) == INF  # a middle value is censored
    assert median([10, 20, 30, INF, INF]) == 30  # censored runs still count, not dropped


def test_bootstrap_ci_brackets_median_and_is_degenerate_for_constant_data():
    assert bootstrap_median_ci([7, 7, 7, 7, 7]) == (7.0, 7.0)
    lo, hi = bootstrap_median_ci([10, 12, 14, 16, 18, 20, 22], n_boot=5000)
    assert lo <= 16 <= hi and 10 <= lo and hi <= 22


def test_bootstrap_ci_upper_bound_inf_when_censored():
    lo, hi = bootstrap_median_ci([10, 20, 30, INF, INF])
    assert hi == INF and lo >= 10


def _brute_force_signed_rank_p(d):
    """Two-sided p by enumerating every sign flip of the non-zero |d| (mid-ranks for ties)."""
    d = np.asarray([x for x in d if x != 0], dtype=float)
    ranks = rankdata(np.abs(d))
    observed = abs(ranks[d > 0].sum() - ranks.sum() / 2)
    hits = sum(
        abs(sum(r for r, s in zip(ranks, signs) if s) - ranks.sum() / 2) >= observed - 1e-9
        for signs in itertools.product([0, 1], repeat=len(d))
    )
    return hits / 2 ** len(d)


def test_signed_rank_by_hand():
    # 6 positive differences: only the all-positive and all-negative flips are as extreme → 2/64
    assert signed_rank_test([1, 2, 3, 4, 5, 6]) == pytest.approx(2 / 64)
    assert smallest_signed_rank_p(6) == pytest.approx(2 / 64)
    # zeros are dropped (Wilcoxon's convention); one non-zero pair cannot show anything
    assert signed_rank_test([0, 0, 5]) == 1.0 and signed_rank_test([0, 0]) == 1.0
    assert smallest_signed_rank_p(5) == pytest.approx(0.0625)  # 5 seeds can never reach p < 0.05


@pytest.mark.parametrize(
    "d",
    [
        [3, -1, 4, 7, 5, 9, 2, 6],  # no ties: scipy's exact distribution
        [-12, -30, 4, -25, -40, -8, -17, -3, -22, 11],
    ],
)
def test_signed_rank_matches_scipy_exact(d):
    assert signed_rank_test(d) == pytest.approx(wilcoxon(d, method="exact").pvalue, rel=1e-12)


@pytest.mark.parametrize(
    "d",
    [
        [5, 5, -5, 10, 10, 20, 0, 3],  # ties and a zero (censored runs capped at the horizon)
        [-180, -180, -30, -5, 0, 0, 12, -180, -41, -180],
    ],
)
def test_signed_rank_with_ties_matches_full_enumeration(d):
    assert signed_rank_test(d) == pytest.approx(_brute_force_signed_rank_p(d), rel=1e-9)


def test_signed_rank_equals_scipys_permutation_enumeration_on_random_tied_data():
    # the subset-sum count must give scipy's exact permutation p (the report's test before it was
    # made fast) on capped step differences: many ties, zeros, up to 14 pairs (scipy enumerates 2^n
    # sign flips, seconds at 14 pairs: one case there, the rest up to 11)
    from scipy.stats import PermutationMethod

    rng = np.random.default_rng(7)
    for n in [int(rng.integers(2, 12)) for _ in range(60)] + [14]:
        d = [float(x) for x in np.clip(rng.integers(-8, 9, size=n) + rng.integers(-2, 3), -10, 10)]
        nonzero = [x for x in d if x != 0]
        if len(nonzero) < 2:
            continue
        expected = wilcoxon(nonzero, zero_method="wilcox", method=PermutationMethod(n_resamples=np.inf)).pvalue
        assert signed_rank_test(d) == pytest.approx(float(expected), rel=1e-12, abs=0)


def test_the_batched_signed_rank_test_equals_the_single_one_row_by_row():
    from sweeps.deciding.statistics import signed_rank_tests

    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 9, 16):
        batch = np.clip(rng.integers(-6, 7, size=(80, n)) + rng.normal(0, 0.3, size=(80, n)).round(), -8, 8)
        batch[:3] = 0  # rows of zeros only
        expected = [signed_rank_test(row) for row in batch]
        assert signed_rank_tests(batch).tolist() == expected


def test_hodges_lehmann_by_hand_and_against_test_inversion():
    # Walsh averages of (1, 2, 3): 1, 1.5, 2, 2, 2.5, 3 → median 2
    assert hodges_lehmann([1, 2, 3])[0] == 2.0
    # n = 5: P(T+ = 0) = 1/32 > 0.025, so no exact 95% interval exists
    assert hodges_lehmann([1, 2, 3, 4, 5])[1:] == (-INF, INF)
    # the interval is the set of shifts θ that the exact two-sided test (scipy) does not reject
    d = np.array([3.1, -1.2, 4.4, 7.9, 5.3, 9.6, 2.05, 6.7, -0.4, 8.15])
    est, lo, hi = hodges_lehmann(d)
    thetas = np.linspace(-5, 15, 4001)
    kept = [t for t in thetas if wilcoxon(d - t, method="exact").pvalue > 0.05]
    assert lo == pytest.approx(min(kept), abs=0.01) and hi == pytest.approx(max(kept), abs=0.01)
    assert lo < est < hi


def test_friedman_matches_scipy_and_pairs_two_levels():
    blocks = [[12, 30, 45], [20, 25, 60], [15, 40, 41], [18, 22, 70], [30, 35, 50]]
    assert friedman_test(blocks) == pytest.approx(friedmanchisquare(*np.array(blocks).T).pvalue)
    assert friedman_test([[1, 2], [3, 5], [2, 9]]) == signed_rank_test([-1, -2, -7])
    assert friedman_test([[5, 5, 5], [5, 5, 5]]) == 1.0


def test_capped_keeps_order():
    assert capped([10, INF, 30], 200) == [10, 200, 30]


def test_clopper_pearson_upper_by_hand():
    # 0 of n: the bound solves (1 − p)^n = 0.05 → p = 1 − 0.05^(1/n)
    assert clopper_pearson_upper(0, 10) == pytest.approx(1 - 0.05 ** (1 / 10))
    assert clopper_pearson_upper(3, 3) == 1.0


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04 → ×3, ×2, ×1 = 0.03, 0.04, 0.04 (monotone), back in input order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, math.nan])[0] == 0.5 and math.isnan(holm([0.5, math.nan])[1])


def test_mean_band_by_hand():
    mean, lo, hi = mean_band([[0.0, 1.0, 9.0], [2.0, 3.0]])  # cut to the shortest: 2 steps
    assert mean.tolist() == [1.0, 2.0]
    # std of (0, 2) = √2, SE = √2/√2 = 1 → band ±1.96
    assert lo.tolist() == pytest.approx([1 - 1.96, 2 - 1.96]) and hi.tolist() == pytest.approx([2.96, 3.96])


def test_two_sample_hodges_lehmann_by_hand_and_against_test_inversion():
    from scipy.stats import mannwhitneyu

    from sweeps.deciding.statistics import hodges_lehmann_two_sample, rank_sum_test

    # all 36 differences of 11..16 against 1..6 lie in 5..15, median 10; 6 + 6 values in two separate
    # blocks: the most extreme split of C(12, 6) = 924, twice (two-sided)
    assert hodges_lehmann_two_sample(range(11, 17), range(1, 7))[0] == 10.0
    assert rank_sum_test(range(11, 17), range(1, 7)) == pytest.approx(2 / 924)
    assert rank_sum_test([3, 3, 3], [3, 3]) == 1.0
    assert hodges_lehmann_two_sample([1, 2], [3])[1:] == (-INF, INF)  # 3 orderings: no 95% interval exists
    # the interval is the set of shifts θ that the exact two-sided rank-sum test (scipy) does not reject
    x = np.array([3.1, 7.4, 5.2, 9.9, 6.3, 4.05, 8.8])
    y = np.array([1.2, 2.9, 0.4, 4.6, 3.7, 2.15, 5.5, 1.9])
    est, lo, hi = hodges_lehmann_two_sample(x, y)
    kept = [t for t in np.linspace(-4, 12, 3201) if mannwhitneyu(x - t, y, method="exact").pvalue > 0.05]
    assert lo == pytest.approx(min(kept), abs=0.01) and hi == pytest.approx(max(kept), abs=0.01)
    assert lo < est < hi
    assert rank_sum_test(x, y) == pytest.approx(mannwhitneyu(x, y, method="exact").pvalue, rel=1e-9)


def test_the_batched_friedman_test_equals_the_single_one_table_by_table():
    from sweeps.deciding.statistics import friedman_tests

    rng = np.random.default_rng(3)
    for levels in (2, 3, 4):
        tables = rng.integers(0, 4, size=(60, 7, levels)).astype(float)  # small integers: many ties
        tables[0] = 5.0  # every seed tied across its levels: p = 1
        got = friedman_tests(tables)
        assert got[0] == 1.0
        assert got.tolist() == pytest.approx([friedman_test(t) for t in tables], rel=1e-9, abs=1e-12)
