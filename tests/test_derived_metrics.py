"""The metrics the report derives from a run's folder (sweeps/deciding/runs.py: the final length
within right and within wrong replies, the learning rate given before learning): hand-computed
cases, and a verdict on the second."""

import json
import math

import pytest

from sweeps.deciding.runs import Run
from sweeps.deciding.verdicts import check_paired

CONFIG = {"stl_window": 4, "max_steps": 12}


def _run(seed: int, rates: list, stl, arm: str = "a") -> Run:
    metrics = [{"step": s, "reward": 0.0, "loss": 0.0, "learning_rate": lr} for s, lr in enumerate(rates, 1)]
    return Run({"arm": arm, "seed": seed}, {**CONFIG, "seed": seed}, {"steps_to_learn": stl}, metrics)


def test_the_final_length_is_read_within_right_and_within_wrong_replies(tmp_path):
    run = _run(0, [1e-5] * 12, 9)
    run.folder = tmp_path
    rows = [
        (8, 1.0, 10),
        (9, 0.0, 30),
        (9, 1.0, 14),
        (10, 0.0, 50),
        (12, 1.0, 12),
        (12, 0.0, 40),
        (7, 1.0, 99),
    ]  # step 7 is before the last stl_window (4) steps of 12: not read
    (tmp_path / "completions.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "reward": r, "length": n, "prompt": "p", "completion": "c"}) + "\n"
            for s, r, n in rows
        )
    )
    assert run.value("final_length_correct") == pytest.approx((14 + 12) / 2)
    assert run.value("final_length_wrong") == pytest.approx((30 + 50 + 40) / 3)


def test_the_learning_rate_given_before_learning_counts_the_updates_before_steps_to_learn():
    ramp = [0.0, 0.5e-5, 1e-5, 1.5e-5] + [2e-5] * 8  # a 3-step ramp to 2e-5
    # learned at step 6: the updates of steps 1-5 were given 0 + 0.5 + 1 + 1.5 + 2 = 5 steps at 1e-5
    assert _run(0, ramp, 6).value("lr_to_learn") == pytest.approx(5.0)
    assert _run(0, [2e-5] * 12, 4).value("lr_to_learn") == pytest.approx(6.0)
    assert math.isinf(_run(0, ramp, None).value("lr_to_learn"))


def test_lr_to_learn_is_compared_by_seed_with_never_learned_runs_at_the_least_rate_given():
    # the ramp (0, 1, 2, then 3 ×1e-5) learns a step later than the constant 3e-5 on each seed,
    # after 3 steps at 1e-5 less rate given (ramp at 6: 0+1+2+3+3 = 9; constant at 5: 4 × 3 = 12;
    # and at 7 against 6: 12 against 15); seed 7's ramp run never learns and is counted at the
    # least rate any run was given in all (the ramp's 0+1+2+9×3 = 30): 30 − 15 = +15
    from sweeps.spec import SweepSpec

    ramp, flat = [0.0, 1e-5, 2e-5] + [3e-5] * 9, [3e-5] * 12
    runs = [_run(s, ramp, None if s == 7 else 6 + s % 2, "warmup") for s in range(8)] + [
        _run(s, flat, 5 + s % 2, "flat") for s in range(8)
    ]
    spec = SweepSpec.__new__(SweepSpec)
    spec.grid, spec.arms = {"arm": ["warmup", "flat"]}, {}
    test = {
        "kind": "paired",
        "axis": "arm",
        "treatment": ["warmup"],
        "control": "flat",
        "direction": "higher",
        "metric": "lr_to_learn",
        "statement": "the ramp needs more rate",
    }
    v = check_paired(spec, runs, test)
    assert v.comparisons[0].diffs == [pytest.approx(-3.0)] * 7 + [pytest.approx(15.0)]
    assert "steps at 1e-05, never-learned runs at the least given in all" in v.table
