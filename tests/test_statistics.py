"""Statistics on hand-made data with known answers."""

import math

import pytest

from grpo_core.statistics import (INF, bootstrap_median_ci, censored_values, holm, kruskal_test, learned_fraction,
                                  mean_band, median, rank_test)


def test_censored_values_and_learned_fraction():
    steps = [10, None, 30, None]
    assert censored_values(steps) == [10.0, INF, 30.0, INF]
    assert learned_fraction(steps) == 0.5


def test_median_with_censored_runs():
    assert median([30, 10, 20]) == 20
    assert median([10, 20, 30, 40]) == 25
    assert median([10, INF, INF]) == INF  # most runs never learned: "> max_steps"
    assert median([10, 20, INF, INF]) == INF  # a middle value is censored
    assert median([10, 20, 30, INF, INF]) == 30  # censored runs still count, not dropped


def test_bootstrap_ci_brackets_median_and_is_degenerate_for_constant_data():
    assert bootstrap_median_ci([7, 7, 7, 7, 7]) == (7.0, 7.0)
    lo, hi = bootstrap_median_ci([10, 12, 14, 16, 18, 20, 22], n_boot=5000)
    assert lo <= 16 <= hi and 10 <= lo and hi <= 22


def test_bootstrap_ci_upper_bound_inf_when_censored():
    lo, hi = bootstrap_median_ci([10, 20, 30, INF, INF])
    assert hi == INF and lo >= 10


def test_rank_test_known_values():
    # complete separation, n = 5 vs 5: exact one-sided p = 1 / C(10, 5) = 1/252
    assert rank_test([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], "less") == pytest.approx(1 / 252)
    # never-learned runs rank above every learned one: same answer as large observed values
    assert rank_test([1, 2, 3, 4, 5], [INF] * 5, "less") == pytest.approx(rank_test([1, 2, 3, 4, 5], [6] * 5, "less"))
    assert rank_test([INF] * 3, [INF] * 3) == 1.0  # all censored: no evidence
    assert rank_test([6, 7, 8], [1, 2, 3], "less") > 0.9  # wrong direction


def test_censored_are_not_dropped():
    # dropping the censored runs would make b look better (median 5 vs 6); counting them, a
    # learns sooner in 30 of 36 pairs: one-sided p ≈ 0.02
    a, b = [6] * 6, [5] + [INF] * 5
    assert rank_test(a, b, "less") < 0.05
    assert rank_test([6] * 6, [5], "less") > 0.5  # what dropping them would conclude


def test_kruskal_known_value():
    # three separated groups of 3: H = 7.2, p = exp(-7.2 / 2) (chi-square with 2 dof)
    p = kruskal_test([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert p == pytest.approx(math.exp(-3.6), rel=1e-6)
    assert kruskal_test([[INF, INF], [INF, INF]]) == 1.0


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04 → ×3, ×2, ×1 = 0.03, 0.04, 0.04 (monotone), back in input order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, math.nan])[0] == 0.5 and math.isnan(holm([0.5, math.nan])[1])


def test_mean_band_by_hand():
    mean, lo, hi = mean_band([[0.0, 1.0, 9.0], [2.0, 3.0]])  # cut to the shortest: 2 steps
    assert mean.tolist() == [1.0, 2.0]
    # std of (0, 2) = √2, SE = √2/√2 = 1 → band ±1.96
    assert lo.tolist() == pytest.approx([1 - 1.96, 2 - 1.96]) and hi.tolist() == pytest.approx([2.96, 3.96])
