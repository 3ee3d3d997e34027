"""Manipulation checks as gates, equivalence against a declared margin, intervals rounded outward,
and the placebo's set-up keys: hand-made runs and hand-computed numbers (sweeps/deciding/)."""

import math

import numpy as np
import pytest

from grpo_core.util.errors import UserInputError
from sweeps.deciding import statistics as st
from sweeps.deciding.gates import placebo_gate, PlaceboRecord, setup_of
from sweeps.deciding.mechanism import MECHANISM_NOT_ENGAGED, gated, mechanism_checks, run_value
from sweeps.deciding.replication import replicated_verdicts
from sweeps.deciding.runs import Run
from sweeps.deciding.verdicts import fmt_interval
from sweeps.report_spec import validate_report
from sweeps.spec import SweepSpec

CLIP = {
    "kind": "paired",
    "statement": "cispo learns sooner",
    "metric": "steps_to_learn",
    "axis": "loss_type",
    "treatment": ["cispo"],
    "control": "dapo",
    "direction": "lower",
}
CHECK = {
    "what": "the clipped arm clips ≥ 2% of tokens on off-policy steps",
    "reason": "r",
    "metric": "clip_ratio",
    "steps": "off_policy",
    "arms": {"loss_type": ["dapo"]},
    "at_least": 0.02,
}


def _spec(report, seeds=8):
    return SweepSpec(
        name="m",
        base={},
        grid={"loss_type": ["dapo", "cispo"]},
        seeds=list(range(seeds)),
        replication_seeds=list(range(seeds, 2 * seeds)),
        report=report,
    )


def _runs(clip, seeds=16, stl=lambda arm, seed: 20):
    """μ = 2: steps 2, 4, … reuse their batch (off-policy); the dapo arm clips `clip` of its tokens
    there and nothing on-policy; steps_to_learn from `stl`."""
    runs = []
    for seed in range(seeds):
        for arm in ("dapo", "cispo"):
            metrics = [
                {
                    "step": s,
                    "reward": 0.2,
                    "loss": 0.0,
                    "grad_norm": 0.5,
                    "clip_ratio": clip if arm == "dapo" and s % 2 == 0 else 0.0,
                }
                for s in range(1, 41)
            ]
            value = stl(arm, seed)
            runs.append(
                Run(
                    {"loss_type": arm, "seed": seed},
                    {
                        "max_steps": 40,
                        "num_iterations": 2,
                        "steps_per_generation": None,
                        "gradient_accumulation_steps": 1,
                        "max_grad_norm": 1.0,
                        "stl_window": 4,
                    },
                    {"steps_to_learn": value, "reward_auc": 0.4, "learned": 1},
                    metrics,
                )
            )
    return runs


def _verdicts(spec, runs):
    from sweeps.deciding.mechanism import gates_test

    checks = mechanism_checks(spec, runs)
    return [gated(v, [c for c in checks if gates_test(c, 0)]) for v, _ in replicated_verdicts(spec, runs)]


def test_a_null_whose_mechanism_check_fails_reads_mechanism_not_engaged():
    """The same tied runs: with the clip binding on 0.2% of off-policy tokens (the room regime's C7)
    the null reads "mechanism not engaged", naming the value; at 5% it stays a null; the check's
    value is the off-policy steps' mean (the on-policy steps would halve it)."""
    spec = _spec({"tests": [CLIP], "mechanism": [CHECK]})
    steps, auc = _verdicts(spec, _runs(clip=0.002))
    assert steps.verdict == auc.verdict == MECHANISM_NOT_ENGAGED
    assert "loss_type=dapo: 0.002 (needs ≥ 0.02): not engaged" in steps.reason
    assert "the runs alone read no effect detected" in steps.reason
    engaged, _ = _verdicts(spec, _runs(clip=0.05))
    assert engaged.verdict == "no effect detected" and engaged.checks[0].passed is True
    assert run_value(_runs(clip=0.05)[0], CHECK) == pytest.approx(0.05)
    assert run_value(_runs(clip=0.05)[0], {**CHECK, "steps": "all"}) == pytest.approx(0.025)


def test_a_supported_verdict_keeps_its_word_and_shows_the_failed_check():
    spec = _spec({"tests": [CLIP], "mechanism": [CHECK]})
    steps, _ = _verdicts(spec, _runs(clip=0.0, stl=lambda arm, seed: 15 if arm == "cispo" else 20 + seed % 3))
    assert steps.verdict == "supported" and steps.checks[0].passed is False


def test_share_clipped_counts_the_steps_whose_gradient_was_clipped():
    run = _runs(clip=0.0)[0]
    for m in run.metrics[:10]:
        m["grad_norm"] = 4.96
    check = {"what": "w", "reason": "r", "metric": "grad_norm", "per_run": "share_clipped", "at_most": 0.1}
    assert run_value(run, check) == pytest.approx(10 / 40)
    run.config["max_grad_norm"] = 0.0  # clipping off: it never binds
    assert run_value(run, check) == 0.0


SPREAD = [-1, -1, 0, 0, 0, 1, 1, 1]  # paired differences (steps) of each seed set, seed by seed


def test_equivalence_needs_both_sets_90_percent_intervals_inside_the_margin():
    """By hand, SPREAD: its 36 Walsh averages are −1 ×3, −0.5 ×6, 0 ×12, 0.5 ×9 and 1 ×6; with 8
    pairs the exact signed-rank test puts the 90% bounds at the 6th smallest and 6th largest
    (P(T+ ≤ 5) = 10/256 ≤ 0.05 < P(T+ ≤ 6) = 14/256): [−0.5, 1], printed outward as [−1, +1].
    Strictly inside ±1.5: equivalent within ±1.5 steps; not inside ±1: only "no effect detected"."""
    assert st.hodges_lehmann(SPREAD, 0.90) == (0.0, -0.5, 1.0)
    stl = lambda arm, seed: 20 + (SPREAD[seed % 8] if arm == "cispo" else 0)
    for margin, word in ((1.5, "equivalent within ±1.5 steps"), (1, "no effect detected")):
        spec = _spec({"tests": [CLIP], "margins": {"steps": margin}})
        steps, auc = [v for v, _ in replicated_verdicts(spec, _runs(0.05, stl=stl))]
        assert steps.verdict == word, steps.reason
        assert (
            "[−1, +1], covering the mean in 89% of resamples" in steps.reason
        )  # each set's 90% interval, and its coverage
        assert auc.verdict == "no effect detected"  # no reward_auc margin declared: no equivalence on it


def test_equivalence_is_refused_where_the_interval_misses_the_mean():
    """7 ties and one pair at +4 steps (the C3 pattern the review found): the 90% interval [0, 2]
    lies inside ±2.5, but resampled it covers the mean (0.5) only when the outlier is drawn, about
    1 − (7/8)^8 = 66% of the time, far below 90%: no equivalence."""
    d = [0] * 7 + [4]
    assert st.hodges_lehmann(d, 0.90) == (0.0, 0.0, 2.0)
    assert abs(st.hodges_lehmann_coverage(d, 0.90) - (1 - (7 / 8) ** 8)) < 0.03
    assert 0.9999 < st.hodges_lehmann_coverage(d, 0.90, "pseudo-median") < 1.0
    # the pseudo-median (0) it covers but in the rare resamples made mostly of the outlier (exact: not 1)
    spec = _spec({"tests": [CLIP], "margins": {"steps": 2.5}})
    stl = lambda arm, seed: 20 + (4 if arm == "cispo" and seed in (3, 11) else 0)
    steps, _ = [v for v, _ in replicated_verdicts(spec, _runs(0.05, stl=stl))]
    assert steps.verdict == "no effect detected" and "do not cover the mean difference" in steps.reason


def test_a_significant_effect_inside_the_margin_says_so_and_still_passes_the_positive_gate():
    """Every pair 1 step sooner on both sets: the exact signed-rank p is 2/2^8 = 0.0078 on each set,
    and the 90% interval is [−1, −1] (all 36 Walsh averages are −1), covering the mean in every
    resample. Inside ±1.5 steps: "supported, but inside the margin ±1.5 steps"; ±1 does not hold it
    strictly: plain "supported". A positive control reading it has shown an effect: its gate opens."""
    from sweeps.report_spec import report_tests
    from sweeps.reporting.positive_gate import positive_gate

    stl = lambda arm, seed: 20 - (1 if arm == "cispo" else 0)
    for margin, word in ((1.5, "supported, but inside the margin ±1.5 steps"), (1, "supported")):
        spec = _spec({"tests": [CLIP], "margins": {"steps": margin, "reward_auc": 0.03}})
        results = [v for v, _ in replicated_verdicts(spec, _runs(0.05, stl=stl))]
        steps, auc = results
        assert steps.verdict == word, steps.reason
        assert ("every 90% interval lies inside the declared margin ±1.5 steps on both seed sets" in steps.reason) == (
            margin == 1.5
        )
        assert auc.verdict == "equivalent within ±0.03"  # the reward AUCs tie: a null, read as before
    spec = _spec({"tests": [CLIP], "margins": {"steps": 1.5}})
    results = [v for v, _ in replicated_verdicts(spec, _runs(0.05, stl=stl))]
    results[1].verdict = "supported, but inside the margin ±0.03"  # as if the AUC moved a little too
    assert positive_gate("pc", results, report_tests(spec)) is None
    results[1].verdict = "no effect detected"
    assert positive_gate("pc", results, report_tests(spec)) == "the positive control (pc) reads no effect detected"


def test_a_test_whose_control_arm_has_no_finished_run_yet_reads_without_a_target():
    """A spec in training whose first runs are all of the treated arm (C7's first six runs had no dapo
    run): the test's facts have no control median, so no target in steps; the report is still written
    (it had stopped on max() of no medians)."""
    spec = _spec({"tests": [CLIP]})
    runs = [r for r in _runs(0.05) if r.point["loss_type"] == "cispo"]
    steps, auc = [v for v, _ in replicated_verdicts(spec, runs)]
    assert steps.facts["control"] == [] and "target" not in steps.facts
    assert steps.verdict.startswith("inconclusive") and auc.verdict.startswith("inconclusive")  # no pairs
    from sweeps.reporting.summary import summary_row

    assert summary_row("C7", steps, auc).split(" | ")[6] == "no finished run yet"  # the control column


def test_equivalence_is_not_read_from_one_seed_set():
    spec = SweepSpec(
        name="m",
        base={},
        grid={"loss_type": ["dapo", "cispo"]},
        seeds=list(range(8)),
        report={"tests": [CLIP], "margins": {"steps": 2}},
    )
    steps, _ = [v for v, _ in replicated_verdicts(spec, _runs(0.05, seeds=8))]
    assert steps.verdict == "no effect detected"


def test_interval_bounds_are_rounded_outward():
    assert fmt_interval(0.25, 0.0, 0.5, "steps_to_learn") == "+0 [+0, +1]"  # once "[+0, +0]"
    assert fmt_interval(-1.5, -2.5, -0.5, "steps_to_learn") == "−2 [−3, +0]"
    assert fmt_interval(0.0123, -0.01234, 0.04501, "reward_auc") == "+0.012 [−0.013, +0.046]"
    assert fmt_interval(1.0, 1.0, 3.0000000001, "steps_to_learn") == "+1 [+1, +3]"  # float noise is not a step


def test_a_placebo_at_one_iteration_does_not_cover_runs_at_two():
    """num_iterations and steps_per_generation are set-up keys: at μ 2 each batch's reward is logged
    twice, so a μ 1 placebo says nothing about its false positives."""
    cfg = {"model": "m", "max_steps": 40, "num_iterations": 1, "steps_per_generation": None}
    placebo = PlaceboRecord("r0", {setup_of(cfg): 40}, True, "supported")
    run = Run({"seed": 0}, {**cfg, "num_iterations": 2}, {}, [])
    why = placebo_gate([placebo], [run])
    assert why is not None and "num_iterations 2" in why
    assert placebo_gate([placebo], [Run({"seed": 0}, cfg, {}, [])]) is None


def test_a_placebo_still_in_training_neither_opens_nor_closes_the_gate_until_a_run_learns():
    """A 100-step placebo of the same set-up arriving run by run also covers a 40-step claim: with 1
    of its 10 runs in, it withheld every 40-step claim its finished 40-step placebo had passed. Now
    it stands aside until it is complete, and alone it still opens nothing; one run of it that
    learns closes the gate at once (the placebo cannot pass any more)."""
    cfg = {"model": "m", "max_steps": 40}
    short = PlaceboRecord("r0_room", {setup_of(cfg): 40}, True, "supported")
    arriving = PlaceboRecord(
        "r0_long", {setup_of(cfg): 100}, False, "inconclusive (1 of 10 runs finished)", complete=False
    )
    room, long = Run({"seed": 0}, cfg, {}, []), Run({"seed": 0}, {**cfg, "max_steps": 90}, {}, [])
    assert placebo_gate([short, arriving], [room]) is None
    why = placebo_gate([short, arriving], [long])  # only the one in training covers 90 steps
    assert (
        why == "the placebo of this set-up over 90 steps or more (r0_long) reads inconclusive (1 of 10 runs finished)"
    )
    learned = PlaceboRecord(
        "r0_long",
        {setup_of(cfg): 100},
        False,
        "inconclusive (2 of 10 runs finished)",
        complete=False,
        false_positives=1,
    )
    why = placebo_gate([short, learned], [room])
    assert (
        why is not None
        and why.startswith("the placebo (r0_long) reads")
        and "1 of its runs got a steps_to_learn" in why
    )
    # complete and failed: closes the gate, whatever a shorter placebo read
    failed = PlaceboRecord("r0_long", {setup_of(cfg): 100}, False, "not replicated")
    assert placebo_gate([short, failed], [room]) == "the placebo (r0_long) reads not replicated"


@pytest.mark.parametrize(
    "check, fault",
    [
        ({**CHECK, "at_most": 0.1}, "exactly one of at_least, at_most"),
        ({**CHECK, "steps": "from:0"}, "steps: 'from:0'; allowed: all, off_policy"),
        ({**CHECK, "arms": {"loss_type": ["grpo"]}}, "arms.loss_type: ['grpo']"),
        ({**CHECK, "tests": [3]}, "tests: [3]; allowed: a list of indices of report.tests (0 to 0)"),
        ({**CHECK, "metric": "steps_to_learn"}, "steps and per_run read a per-step metric"),
        ({k: v for k, v in CHECK.items() if k != "reason"}, "mechanism[0].reason: None"),
        (
            {**CHECK, "metric": "clip_ratoi"},
            "metric: 'clip_ratoi' is logged by no run, so the check could never be read",
        ),
        ({**CHECK, "steps": "from:41"}, "steps: from:41 is past the last step any run trains (40)"),
    ],
)
def test_a_bad_mechanism_check_is_one_line_before_anything_runs(check, fault):
    spec = _spec({"tests": [CLIP], "mechanism": [check]})
    spec.base["max_steps"] = 40
    with pytest.raises(UserInputError) as err:
        validate_report(spec)
    assert fault in str(err.value) and "\n" not in str(err.value)


def test_every_per_step_key_a_run_logs_is_one_a_check_may_name(tmp_path):
    """The registry a check's metric is refused against at load time holds every key the trainer
    logs, here with every switch that adds one on (so a valid check is never refused)."""
    import json

    from conftest import run_grpo_here
    from sweeps.report_spec import STEP_METRICS, is_logged_metric

    keys = set()
    for i, sets in enumerate(
        [
            [
                "entropy_coef=0.01",
                "top_entropy_quantile=0.5",
                "beta=0.04",
                "kl_in_reward=true",
                "eval_every=1",
                "overlong_buffer_len=2",
            ],
            ["zero_variance_groups=resample", "max_num_gen_batches=2"],
        ]
    ):
        out = tmp_path / f"run{i}"
        done = run_grpo_here(
            "train",
            "--no-mlflow",
            "--out",
            str(out),
            "--set",
            "max_steps=1",
            *[a for kv in sets for a in ("--set", kv)],
        )
        assert done.returncode == 0, done.stderr
        keys |= {k for line in (out / "metrics.jsonl").read_text().splitlines() for k in json.loads(line)}
    assert {
        "entropy_bonus",
        "entropy_mask_share",
        "kl_in_reward",
        "eval/accuracy",
        "groups/sampled",
        "update_norm",
    } <= keys  # the switches were on
    assert [k for k in sorted(keys) if not is_logged_metric(k)] == []
    assert not is_logged_metric("grad_nrom") and "grad_norm_to_optimizer" in STEP_METRICS


def test_a_bad_margin_is_one_line():
    with pytest.raises(UserInputError, match=r"margins.steps: -1; allowed: a finite number > 0"):
        validate_report(_spec({"tests": [CLIP], "margins": {"steps": -1}}))
    with pytest.raises(UserInputError, match=r"margins.stepz: unknown; allowed: reward_auc, steps, steps_to_learn"):
        validate_report(_spec({"tests": [CLIP], "margins": {"stepz": 1}}))


def test_ruled_out_says_when_the_interval_misses_the_mean():
    """A null whose differences are mostly ties and one large pair: its "ruled out" is about the
    typical pair, and the reason says the mean is not bounded (resampled coverage named)."""
    spec = _spec({"tests": [CLIP]})
    tied = lambda arm, seed: 20 + (4 if arm == "cispo" and seed in (3, 11) else 0)
    steps, _ = [v for v, _ in replicated_verdicts(spec, _runs(0.05, stl=tied))]
    assert steps.verdict == "no effect detected" and "covers their mean in only 6" in steps.reason
    spread = lambda arm, seed: 20 + (SPREAD[seed % 8] if arm == "cispo" else 0)
    steps, _ = [v for v, _ in replicated_verdicts(spec, _runs(0.05, stl=spread))]
    assert steps.verdict == "no effect detected" and "covers their mean" not in steps.reason


def test_a_shared_arm_is_named_on_both_sides(tmp_path):
    """A control arm copied from another claim's sweep (trial-shared-<source>-…) is named in the
    section that copied it and in the source's, so neither reads as independent evidence."""
    from sweeps.reporting.report import borrowers, shared_arms

    for folder in (
        "pc/trial-0001",
        "c3/trial-shared-pc-trial-0001",
        "c3/trial-0002",
        "c5/trial-shared-c1-trial-shared-pc-trial-0001",
    ):
        (tmp_path / folder).mkdir(parents=True)
    assert borrowers(tmp_path, ["pc", "c3", "c5", "absent"]) == {"pc": ["c3", "c5"]}
    spec = SweepSpec(name="c3", base={}, grid={"advantage_noise_std": [0.0, 0.01]}, seeds=[1, 2])
    runs = [
        Run({"advantage_noise_std": 0.0, "seed": 1}, {}, {}, [], tmp_path / "c3/trial-shared-pc-trial-0001"),
        Run({"advantage_noise_std": 0.01, "seed": 2}, {}, {}, [], tmp_path / "c3/trial-0002"),
    ]
    assert shared_arms(spec, runs).startswith("advantage_noise_std=0: 1 runs are `pc`'s")


def test_the_docs_forest_plot_is_the_committed_reports():
    """docs/results.md opens on the real-model report's forest plot: `grpo reproduce --real-cpu`
    writes it beside REPORT.md and into docs/, so the page cannot show another run's picture."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    docs, report = root / "docs" / "forest-real-cpu.png", root / "results" / "real" / "cpu" / "figures" / "forest.png"
    assert docs.read_bytes() == report.read_bytes()
    page = (root / "docs" / "results.md").read_text()
    assert page.index("](forest-real-cpu.png)") < page.index("\n## ")  # at the top, before the first section
    assert (
        "![Every claim's effect, per seed set and testbed](figures/forest.png)"
        in (report.parent.parent / "REPORT.md").read_text()
    )


def test_a_spec_still_training_renders_its_margins_without_pairs():
    """Two runs of a 32-run spec (one per arm, different seeds): no pairs, so no interval to read
    against the margin; the table shows "–" where a bound would be (it once raised on NaN)."""
    from sweeps.deciding.verdicts import _fmt_num

    assert _fmt_num(float("nan"), "steps_to_learn", -1) == "–"
    spec = _spec({"tests": [CLIP], "margins": {"steps": 3, "reward_auc": 0.03}})
    runs = [r for r in _runs(0.05) if (r.point["loss_type"], r.point["seed"]) in (("dapo", 3), ("cispo", 11))]
    steps, auc = [v for v, _ in replicated_verdicts(spec, runs)]
    assert steps.verdict.startswith("inconclusive") and "| 0 | – | 1 | – | [–, –] |" in steps.table


def test_a_check_of_every_arm_is_not_read_while_an_arm_has_no_finished_run():
    """A check with no `arms` reads every arm: with only the cispo arm's runs in (a spec still in
    training, as C5 with room for lengths was at its first run) it is not read, the missing arm shown
    as –, rather than passing on the arms that happen to be there; with both arms in, it passes."""
    every_arm = {
        "what": "at most 10% cut at the cap, in every arm",
        "reason": "r",
        "metric": "clip_ratio",
        "steps": "from:5",
        "at_most": 0.10,
    }
    spec = _spec({"tests": [CLIP], "mechanism": [every_arm]})
    cispo_only = [r for r in _runs(clip=0.05) if r.point["loss_type"] == "cispo"]
    (check,) = mechanism_checks(spec, cispo_only)
    assert check.passed is None and check.state() == "not read"
    assert check.values_text() == "loss_type=cispo: 0; loss_type=dapo: –"
    (check,) = mechanism_checks(spec, _runs(clip=0.05))  # dapo's 0.05 on even steps: 0.025 from step 5
    assert check.passed is True and check.values_text() == "loss_type=cispo: 0; loss_type=dapo: 0.025"
    (check,) = mechanism_checks(spec, [])
    assert check.passed is None and check.values_text() == "no runs"


def test_the_equivalence_coverage_is_the_same_on_every_random_stream():
    # C5's dapo "equivalent within ±5" passed on the report's stream only (coverage 0.875
    # on average over 20 streams of 2,000 draws against the 0.88 rule). The coverage is now computed
    # over every distinct resample, so the seed of the stream cannot move it
    rng = np.random.default_rng(3)
    for d in ([0] * 7 + [4], list(rng.integers(-6, 7, 8)), list(rng.normal(0, 3, 10).round(1))):
        got = {st.hodges_lehmann_coverage(d, 0.90, seed=seed, draws=500) for seed in range(5)}
        assert len(got) == 1
        # and it is the bootstrap's coverage: a long Monte-Carlo run agrees within its error
        n = len(d)
        x = np.asarray(d, float)[np.random.default_rng(0).integers(0, n, size=(100_000, n))]
        lo, hi = zip(*(st.hodges_lehmann(row, 0.90)[1:] for row in x[:4000]))
        mc = np.mean((np.array(lo) <= np.mean(d) + 1e-12) & (np.mean(d) - 1e-12 <= np.array(hi)))
        assert abs(got.pop() - mc) < 4 * np.sqrt(0.25 / 4000)


@pytest.mark.parametrize(
    "name, engaged",
    [
        ("r4_advantage_scale_unclipped_room_cpu", True),
        ("r4_advantage_scale_beta004_room_cpu", False),
        ("r4_advantage_scale_beta0_room_cpu", False),
    ],
)
def test_c4s_check_reads_the_scale_reaching_the_optimizer_and_fails_on_the_clipped_arms(name, engaged):
    # the committed runs: without clipping the ×10 arm's step-1 gradient reaches Adam ×10 (the same
    # seed's ×1 run as reference); with max_grad_norm 1.0 the clip brings the ratio to about 3
    from pathlib import Path

    from sweeps.deciding.mechanism import mechanism_checks
    from sweeps.reporting.report_inputs import collect_runs
    from sweeps.spec import load_spec

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / f"experiments/real/cpu/{name}.yaml", check_points=False)
    runs, _ = collect_runs(root / "results/real/cpu/runs", spec)
    check = next(c for c in mechanism_checks(spec, runs) if "reaches the optimizer" in c.what)
    assert check.passed is engaged
    assert all((v == pytest.approx(10.0, rel=1e-3)) is engaged and (v < 4) is not engaged for _, v in check.values)


def test_a_ratio_check_divides_each_run_by_the_same_seeds_reference():
    from sweeps.deciding.mechanism import TO_OPTIMIZER, ratio_value

    def run(scale, seed, norm, limit):
        return Run(
            {"advantage_scale": scale, "seed": seed},
            {"max_grad_norm": limit, "stl_window": 1},
            {},
            [{"step": 1, "grad_norm": norm}, {"step": 2, "grad_norm": 99.0}],
        )

    check = {"metric": TO_OPTIMIZER, "steps": "first:1", "per_run": "max", "ratio_to": {"advantage_scale": 1.0}}
    unclipped = [run(1.0, 0, 0.3, 0.0), run(10.0, 0, 3.0, 0.0)]
    assert ratio_value(unclipped[1], unclipped, check) == pytest.approx(10.0)
    clipped = [run(1.0, 0, 0.3, 1.0), run(10.0, 0, 3.0, 1.0)]  # the optimizer gets min(3.0, 1.0)
    assert ratio_value(clipped[1], clipped, check) == pytest.approx(1.0 / 0.3)
    assert math.isnan(ratio_value(run(10.0, 5, 3.0, 0.0), unclipped, check))  # no run of seed 5 at ×1


def test_a_check_that_cannot_be_computed_on_finished_runs_fails_and_says_so():
    # a metric no run logs (a typo) had read "not read", the state of a spec still training, and so
    # never closed the gate it declares
    spec = _spec(
        {
            "tests": [CLIP],
            "mechanism": [
                {"what": "w", "reason": "r", "metric": "clip_ratoi", "arms": {"loss_type": ["dapo"]}, "at_least": 0.02}
            ],
        }
    )
    (result,) = mechanism_checks(spec, _runs(0.05))
    assert result.passed is False and result.state() == "not engaged"
    assert "cannot be computed on the finished runs of loss_type=dapo" in result.text()
    (fine,) = mechanism_checks(spec, [])  # no finished run at all: not read, as before
    assert fine.passed is None
