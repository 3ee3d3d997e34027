"""A search's parameter importance says what it rests on: the complete trials behind it, each share's
spread over resamples of those trials, and a ranking withheld where the resamples do not support it
(sweeps/driving/trials.py)."""

import optuna

from sweeps.driving.trials import RANK_HOLDS, importance, importance_spread, importance_table
from sweeps.spec import SweepSpec

SPEC = SweepSpec(name="s", base={}, grid={}, seeds=[0], search={"learning_rate": {}, "beta": {}})


def _study(rows, pruned=0):
    """Trials with params lr and beta and the given values; `pruned` more trials pruned."""
    study = optuna.create_study(direction="minimize")
    dists = {
        "lr": optuna.distributions.FloatDistribution(1e-6, 1e-3, log=True),
        "beta": optuna.distributions.FloatDistribution(0.0, 0.1),
    }
    for lr, beta, value in rows:
        study.add_trial(optuna.trial.create_trial(params={"lr": lr, "beta": beta}, distributions=dists, value=value))
    for _ in range(pruned):
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": 1e-4, "beta": 0.05}, distributions=dists, state=optuna.trial.TrialState.PRUNED
            )
        )
    return study


def test_a_ranking_from_many_clear_trials_holds():
    rows = [(lr, beta, 100 * (lr < 1e-4) + beta) for lr in (1e-5, 3e-5, 2e-4, 5e-4) for beta in (0.0, 0.02, 0.04, 0.08)]
    study = _study(rows)
    spread = importance_spread(study, SPEC)
    assert spread["counts"] == {"complete": 16, "pruned": 0, "fail": 0}
    assert next(iter(importance(study, SPEC)["steps_to_learn"])) == "lr"
    assert spread["holds"]["steps_to_learn"] >= RANK_HOLDS
    low, high = spread["ranges"]["steps_to_learn"]["lr"]
    assert 0.5 < low <= high <= 1.0
    text = importance_table(importance(study, SPEC), spread)
    assert "Rests on 16 complete trial(s)" in text and "the ranking holds" in text


def test_a_ranking_that_noise_decides_is_withheld():
    """Six complete trials whose values are noise around 14.5 steps (two pruned ones beside them):
    fANOVA still apportions the variance (beta first), but over resamples of the six trials the two
    shares' ranges overlap, so the table withholds the ranking and says what it rests on."""
    rows = [
        (1e-5, 0.01, 14),
        (3e-4, 0.09, 15),
        (2e-4, 0.02, 13),
        (5e-4, 0.05, 16),
        (1e-4, 0.07, 14.5),
        (2e-5, 0.03, 15.5),
    ]
    study = _study(rows, pruned=2)
    spread = importance_spread(study, SPEC)
    assert spread["counts"] == {"complete": 6, "pruned": 2, "fail": 0}
    (low_b, high_b), (low_l, high_l) = (spread["ranges"]["steps_to_learn"][p] for p in ("beta", "lr"))
    assert low_b <= high_l  # the ranges overlap
    text = importance_table(importance(study, SPEC), spread)
    assert "Rests on 6 complete trial(s) (2 pruned and 0 failed ones have no value)" in text
    assert "ranking withheld: the ranges of beta and lr overlap" in text
