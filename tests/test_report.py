"""Verdicts come from the statistics: hand-made runs with known outcomes, and `grpo reproduce
--quick` (trimmed) producing a report with a section, a verdict and figures per claim."""

import json
import re
import shutil

import pytest
import yaml

from conftest import CACHE, ROOT, run_grpo, run_grpo_here
from grpo_core.tasks.models import committed_bases
from sweeps.deciding.runs import Run
from sweeps.deciding.replication import replicated_verdicts
from sweeps.deciding.verdicts import check_differ, check_paired, check_placebo, check_zero_loss_step1
from sweeps.spec import SweepSpec


def _spec(grid, seeds=10, replication=0, tests=()):
    return SweepSpec(
        name="t",
        base={},
        grid=grid,
        seeds=list(range(seeds)),
        replication_seeds=list(range(seeds, seeds + replication)),
        report={"tests": list(tests)},
    )


def _run(point, stl=None, loss1=0.0, grad1=1.0, final=0.3, rewards=None, **config):
    cfg = {
        "max_steps": 100,
        "stl_window": 20,
        "stl_delta": 0.05,
        "task": "addition",
        "loss_type": "grpo",
        "num_iterations": 1,
        "beta": 0.0,
        **config,
        **point,
    }
    summary = {
        "steps_to_learn": stl,
        "learned": int(stl is not None),
        "final_reward": final,
        "baseline_reward": 0.2,
        "baseline_reward_se": 0.01,
    }
    metrics = [{"loss": loss1, "grad_norm": grad1, "reward": r} for r in (rewards or [0.2])]
    return Run(point, cfg, summary, metrics)


WARMUP = {
    "kind": "paired",
    "statement": "s",
    "metric": "steps_to_learn",
    "axis": "warmup_ratio",
    "treatment": [0.0],
    "control": 0.25,
    "direction": "lower",
}


def _warmup_runs(seeds=10):
    runs = []
    for seed in range(seeds):
        # lr 1e-4: warmup off learns at 20-29, warmup on 30 steps later → 10 of 10 pairs lower (p = 2/1024)
        runs.append(_run({"warmup_ratio": 0.0, "learning_rate": 1e-4, "seed": seed}, stl=20 + seed))
        runs.append(_run({"warmup_ratio": 0.25, "learning_rate": 1e-4, "seed": seed}, stl=50 + seed))
        # lr 1e-3: warmup off never learns, warmup on does: the opposite of the claim
        runs.append(_run({"warmup_ratio": 0.0, "learning_rate": 1e-3, "seed": seed}, stl=None))
        runs.append(_run({"warmup_ratio": 0.25, "learning_rate": 1e-3, "seed": seed}, stl=30 + seed))
        # lr 3e-4: same step ± a little, alternating → no effect
        runs.append(_run({"warmup_ratio": 0.0, "learning_rate": 3e-4, "seed": seed}, stl=40 + (seed % 2)))
        runs.append(_run({"warmup_ratio": 0.25, "learning_rate": 3e-4, "seed": seed}, stl=40 + ((seed + 1) % 2)))
    return runs


def _only(runs, lr):
    return [r for r in runs if r.point["learning_rate"] == lr]


def test_paired_verdicts_supported_contradicted_and_both():
    runs = _warmup_runs()
    one = lambda lr: _spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [lr]})
    v = check_paired(one(1e-4), _only(runs, 1e-4), WARMUP)
    assert v.verdict == "supported"
    assert "| −30 [−30, −30] |" in v.table  # ten differences of −30: Hodges-Lehmann −30, interval [−30, −30]
    # the opposite effect is not "no effect": two-sided, it is significant the other way
    assert check_paired(one(1e-3), _only(runs, 1e-3), WARMUP).verdict == "contradicted"
    spec = _spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [1e-4, 1e-3, 3e-4]})
    mixed = check_paired(spec, runs, WARMUP).verdict
    assert mixed == "supported only under learning_rate=0.0001; contradicted under learning_rate=0.001"


def _replicated(runs_by_set, spec, test):
    """The combined verdict of `test` on two seed sets (seeds 0-9 and 10-19)."""
    (combined, found) = replicated_verdicts(spec, runs_by_set)[0]  # [1]: its reward-AUC twin
    assert [f.name for f in found] == ["discovery", "replication"]
    return combined, found


def test_a_verdict_holds_only_when_both_seed_sets_agree():
    spec = _spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [1e-4, 1e-3]}, replication=10, tests=[WARMUP])
    both = _warmup_runs(20)
    discovery_only = _warmup_runs(10) + [
        r for r in _warmup_runs(20) if r.point["seed"] >= 10 and r.point["learning_rate"] == 1e-4
    ]
    for seed in range(10, 20):  # on the replication seeds lr 1e-3 shows nothing: warmup on and off alike
        discovery_only += [
            _run({"warmup_ratio": w, "learning_rate": 1e-3, "seed": seed}, stl=40 + (seed + (w > 0)) % 2)
            for w in (0.0, 0.25)
        ]
    v, found = _replicated(_only(both, 1e-4) + _only(both, 1e-3), spec, WARMUP)
    assert v.verdict == "supported only under learning_rate=0.0001; contradicted under learning_rate=0.001"
    assert "discovery (seeds 0–9): supported only under" in v.reason and "replication (seeds 10–19)" in v.reason
    v, found = _replicated(discovery_only, spec, WARMUP)
    assert found[0].verdict.verdict.endswith("contradicted under learning_rate=0.001")
    assert v.verdict == "supported only under learning_rate=0.0001; not replicated under learning_rate=0.001"
    # both p-values and intervals are shown, side by side
    row = next(line for line in v.table.splitlines() if line.startswith("| learning_rate=0.001 |"))
    assert row.count("[") == 2 and "| contradicted | 10 |" in row and row.endswith("| – | not replicated |")


def test_each_steps_test_says_what_its_target_effect_needs():
    # 8 + 8 pairs, differences −1 to −9 around a control median of 20 (15% = 3 steps, above 2): the
    # line names the target and the pairs per set these differences need for it (seeds_needed)
    from sweeps.deciding import power
    from sweeps.reporting.report import facts_text

    spec = _spec({"warmup_ratio": [0.0, 0.25]}, seeds=8, replication=8, tests=[WARMUP])
    diffs = [-1, -5, -9, -3, -7, -2, -6, -4]
    runs = [
        _run({"warmup_ratio": w, "seed": s}, stl=20 + (diffs[s % 8] if w == 0.0 else 0))
        for s in range(16)
        for w in (0.0, 0.25)
    ]
    v, found = _replicated(runs, spec, WARMUP)
    assert v.facts["target"] == 3.0 and power.target_effect(10) == 2.0 and power.target_effect(float("inf")) == 2.0
    noise = power.centered([c.diffs for f in found for c in f.verdict.comparisons])
    assert v.facts["needed"] == power.seeds_needed(noise, 3.0) is not None
    assert (
        f"whichever is larger (3 steps), these differences need {v.facts['needed']} pairs per set; power of this "
        f"verdict, supported on both seed sets, at an effect of 3 steps (the target): "
        f"{v.facts['verdict_power']:.0%}"
    ) in facts_text(v)
    assert v.facts["verdict_power"] == power.verdict_power([f.verdict.comparisons[0].diffs for f in found], 3.0)
    (auc, _) = replicated_verdicts(spec, runs)[1]  # the reward-AUC twin: no target in steps
    assert "target" not in auc.facts and "target" not in facts_text(auc)


def test_placebo_and_checks_must_hold_on_both_sets():
    test = {"kind": "placebo", "statement": "s"}
    spec = _spec({"task": ["addition"]}, replication=10, tests=[test])
    flat = [0.2] * 60
    runs = [_run({"task": "addition", "seed": s}, rewards=flat) for s in range(20)]
    assert _replicated(runs, spec, test)[0].verdict == "supported"
    runs[15] = _run({"task": "addition", "seed": 15}, stl=40, rewards=flat)  # a false positive in replication
    assert _replicated(runs, spec, test)[0].verdict == "not replicated"


def test_one_seed_set_is_never_a_replicated_verdict():
    spec = _spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [1e-4]}, tests=[WARMUP])
    (v, found) = replicated_verdicts(spec, _only(_warmup_runs(), 1e-4))[0]
    assert len(found) == 1 and v.verdict == "not replicated (one seed set: supported)"


def test_no_effect_states_the_largest_effect_still_allowed():
    runs = _only(_warmup_runs(), 3e-4)
    v = check_paired(_spec({"warmup_ratio": [0.0, 0.25], "learning_rate": [3e-4]}), runs, WARMUP)
    # differences alternate −1, +1: HL 0, exact interval [−1, 1] → a speed-up above 1 step is ruled out
    assert v.verdict == "no effect detected"
    assert "a speed-up of more than 1 step is ruled out" in v.reason
    assert "largest allowed" not in v.reason  # one comparison: nothing to name


def test_the_largest_effect_allowed_names_its_comparison_among_several():
    from sweeps.deciding.verdicts import _allowed, Comparison

    def comparison(label, low, high):
        return Comparison(
            label=label, n_pairs=6, estimate=0.0, low=low, high=high, p=1.0, best_p=0.03, informative=True
        )

    both = [comparison("lr 1e-4", -3.0, 2.0), comparison("lr 3e-4", -5.0, 1.0)]
    assert (
        _allowed(both, "lower", "steps_to_learn")
        == "a speed-up of more than 5 steps is ruled out (largest allowed: lr 3e-4)"
    )
    assert _allowed(both, "higher", "final_reward") == (
        "an increase of final_reward of more than 2 is ruled out (largest allowed: lr 1e-4)"
    )
    assert (
        _allowed(both[:1], None, "completions_to_learn") == "a paired difference larger than 3 completions is ruled out"
    )
    assert (
        _allowed([comparison("all runs", -1.0, 0.5)], None, "completions_to_learn")
        == "a paired difference larger than 1 completion is ruled out"
    )


def test_no_effect_whose_interval_starts_at_zero_rules_out_any_speed_up():
    # the real CPU report's C3 read "a speed-up of more than -0 steps": every difference ≥ 0, interval [+0, +1]
    runs = []
    for seed in range(6):
        runs.append(_run({"advantage_noise_std": 0.0, "seed": seed}, stl=10))
        runs.append(_run({"advantage_noise_std": 0.01, "seed": seed}, stl=10 + (seed == 0)))
    test = {
        "statement": "s",
        "metric": "steps_to_learn",
        "axis": "advantage_noise_std",
        "treatment": [0.01],
        "control": 0.0,
        "direction": "lower",
    }
    v = check_paired(_spec({"advantage_noise_std": [0.0, 0.01]}), runs, test)
    assert v.verdict == "no effect detected"
    assert "any speed-up is ruled out (every 95% interval's lower end is ≥ 0)" in v.reason and "-0" not in v.reason


def test_claimed_magnitude_is_tested():
    # noise makes no difference: paired differences −2..+2 → the PR's ~−85 is ruled out
    runs = []
    for seed in range(10):
        runs.append(_run({"advantage_noise_std": 0.0, "seed": seed}, stl=110 + seed))
        runs.append(_run({"advantage_noise_std": 0.01, "seed": seed}, stl=110 + seed + (seed % 5) - 2))
    test = {
        "statement": "s",
        "metric": "steps_to_learn",
        "axis": "advantage_noise_std",
        "treatment": [0.01],
        "control": 0.0,
        "direction": "lower",
        "claimed_effect": -85,
        "claimed_effect_text": "15 vs >100",
    }
    v = check_paired(_spec({"advantage_noise_std": [0.0, 0.01]}), runs, test)
    assert v.verdict == "no effect detected"
    assert "is ruled out by the 95% interval in 1 of 1 comparisons" in v.reason and "| ruled out |" in v.table


def test_differ_detects_a_spread_and_reports_paired_differences():
    spec = _spec({"loss_type": ["grpo", "bnpo", "dapo"]})
    runs = [
        _run({"loss_type": lt, "seed": s}, stl=base + s)
        for lt, base in (("grpo", 10), ("bnpo", 40), ("dapo", 80))
        for s in range(6)
    ]
    test = {"statement": "s", "metric": "steps_to_learn", "axis": "loss_type"}
    v = check_differ(spec, runs, test)
    assert v.verdict == "supported" and "bnpo: +30 [+30, +30]" in v.table
    same = [
        _run({"loss_type": lt, "seed": s}, stl=30 + s + (i == s % 3))
        for i, lt in enumerate(("grpo", "bnpo", "dapo"))
        for s in range(6)
    ]
    assert check_differ(spec, same, test).verdict == "no effect detected"


def test_a_test_across_levels_says_what_shift_of_one_level_it_could_detect():
    # 8 + 8 seeds, three loss types: grpo learns at 20 + s % 3, bnpo and dapo 1 to 3 steps off it, by
    # seed. Its facts: seeds with every level per set, the smallest shift of one level each set alone
    # detects (power.detectable_shift on these seeds' centered differences), grpo's median as the control
    from sweeps.deciding import power
    from sweeps.reporting.report import facts_text
    from sweeps.reporting.summary import summary_row

    test = {
        "kind": "differ",
        "statement": "the loss type changes steps_to_learn",
        "metric": "steps_to_learn",
        "axis": "loss_type",
    }
    spec = _spec({"loss_type": ["grpo", "bnpo", "dapo"]}, seeds=8, replication=8, tests=[test])
    off = {"grpo": [0] * 8, "bnpo": [1, -2, 3, 0, 2, -1, 1, 2], "dapo": [-1, 2, 0, 1, -3, 2, 1, 0]}
    runs = [_run({"loss_type": lt, "seed": s}, stl=20 + s % 3 + off[lt][s % 8]) for lt in off for s in range(16)]
    v, found = _replicated(runs, spec, test)
    rows = power.centered_blocks([c.blocks for f in found for c in f.verdict.comparisons])
    assert rows.shape == (16, 3) and v.facts["n_per_set"] == [8, 8]
    assert v.facts["detectable"] == power.detectable_shift(rows, 8) and 0 < v.facts["detectable"] < 20
    assert v.facts["control"] == [("", 21.0, 0, 16)] and v.facts["levels_of"] == "loss_type=grpo"
    assert v.facts["target"] == 3.15 and v.facts["needed"] == power.blocks_needed(rows, 3.15)
    line = facts_text(v)
    assert line.startswith(
        "n per set 8 and 8 seeds with every level; smallest shift of one loss_type level each set "
        "alone detects with 80% power: "
    )
    assert "first level (loss_type=grpo): median 21, 0 of 16 never learned" in line and "seeds per set" in line
    assert "| loss_type=grpo: 21 (0/16) |" in summary_row("C5", v, None)


def test_a_test_across_levels_with_no_seed_at_every_level_says_so_without_numbers():
    # a sweep part-way through: grpo and bnpo at 2 + 2 seeds, dapo at none, so no seed has every
    # level. Nothing can be estimated: no "any effect" detectable, no seed count for the target, no nan
    from sweeps.reporting.report import facts_text

    test = {"kind": "differ", "statement": "s", "metric": "steps_to_learn", "axis": "loss_type"}
    spec = _spec({"loss_type": ["grpo", "bnpo", "dapo"]}, seeds=8, replication=8, tests=[test])
    runs = [_run({"loss_type": lt, "seed": s}, stl=20 + s) for lt in ("grpo", "bnpo") for s in (0, 1, 8, 9)]
    v, found = _replicated(runs, spec, test)
    assert v.facts["n_per_set"] == [0, 0] and v.facts["detectable"] != v.facts["detectable"]  # nan
    assert "target" not in v.facts and "needed" not in v.facts
    line = facts_text(v)
    assert "detects with 80% power: – (simulated" in line and "any" not in line and "per set" not in line.split(";")[-1]
    tables = "\n".join(f.verdict.table for f in found)
    assert "nan" not in tables and "bnpo: –; dapo: –" in tables and "grpo: –, bnpo: –, dapo: –" in tables


def test_a_control_median_reads_whole_steps_as_they_are_and_other_metrics_to_3_decimals():
    from sweeps.deciding.verdicts import fmt_value

    assert fmt_value(16.5, "steps_to_learn") == "16.5" and fmt_value(17.0, "steps_to_learn") == "17"
    assert fmt_value(float("inf"), "steps_to_learn") == "not learned"
    assert fmt_value(11.910234, "final:completions/mean_length") == "11.910"


def test_too_few_seeds_is_inconclusive_not_a_no():
    # 5 seeds: the smallest two-sided signed-rank p is 2/32 = 0.0625 > 0.05 whatever the data
    spec = _spec({"advantage_noise_std": [0.0, 0.01]}, seeds=5)
    runs = [_run({"advantage_noise_std": 0.01, "seed": s}, stl=10) for s in range(5)]
    runs += [_run({"advantage_noise_std": 0.0, "seed": s}, stl=None) for s in range(5)]
    test = {
        "statement": "s",
        "metric": "steps_to_learn",
        "axis": "advantage_noise_std",
        "treatment": [0.01],
        "control": 0.0,
        "direction": "lower",
    }
    v = check_paired(spec, runs, test)
    assert v.verdict == "inconclusive (too few seeds)" and "0.0625" in v.reason


def test_nothing_learned_is_inconclusive():
    spec = _spec({"advantage_noise_std": [0.0, 0.01]})
    runs = [_run({"advantage_noise_std": n, "seed": s}, stl=None) for n in (0.0, 0.01) for s in range(10)]
    test = {
        "statement": "s",
        "metric": "steps_to_learn",
        "axis": "advantage_noise_std",
        "treatment": [0.01],
        "control": 0.0,
        "direction": "lower",
    }
    v = check_paired(spec, runs, test)
    assert v.verdict == "inconclusive" and "no run in either arm" in v.reason


def test_placebo_counts_false_positives():
    spec = _spec({"task": ["addition"]})
    # every placebo run stays at the baseline, except one noise spike that the first version counted
    flat = [0.2] * 60
    spiky = [0.2] * 20 + [0.3] * 20 + [0.2] * 20
    runs = [_run({"task": "addition", "seed": s}, rewards=spiky if s == 0 else flat) for s in range(10)]
    v = check_placebo(spec, runs, {"statement": "s"})
    assert v.verdict == "supported" and "| 1 of 10 |" in v.table and "below 0.26" in v.reason
    runs[1] = _run({"task": "addition", "seed": 1}, stl=40, rewards=flat)
    assert check_placebo(spec, runs, {"statement": "s"}).verdict == "contradicted"
    # a seed set with no finished run yet (a GPU sweep cut by its time budget) says nothing either way
    assert check_placebo(spec, [], {"statement": "s"}).verdict == "inconclusive"


def test_zero_loss_step1_needs_every_condition():
    spec = _spec({"loss_type": ["grpo", "bnpo"]})
    good = [_run({"loss_type": "grpo", "seed": s}, stl=40, loss1=1e-8, grad1=1.5) for s in range(3)]
    bnpo = [_run({"loss_type": "bnpo", "seed": s}, stl=40, loss1=0.01, grad1=1.5) for s in range(3)]
    test = {"statement": "s"}
    assert check_zero_loss_step1(spec, good + bnpo, test).verdict == "supported"
    nonzero = [_run({"loss_type": "grpo", "seed": 9}, stl=40, loss1=1e-3)]
    assert check_zero_loss_step1(spec, good + nonzero + bnpo, test).verdict == "contradicted"
    never = [_run({"loss_type": "grpo", "seed": s}, stl=None, loss1=0.0) for s in range(3)]
    assert check_zero_loss_step1(spec, never + bnpo, test).verdict == "contradicted"
    # a bnpo run at 0 (every group with unequal rewards of one length): the corollary reads no and
    # says why; grpo's checks decide the verdict
    equal = [_run({"loss_type": "bnpo", "seed": 9}, stl=40, loss1=-7.8e-9, grad1=1.5)]
    v = check_zero_loss_step1(spec, good + bnpo + equal, test)
    assert v.verdict == "supported" and "in every run: no (smallest |loss| 7.8e-09: " in v.reason
    assert "in every run: yes" in check_zero_loss_step1(spec, good + bnpo, test).reason


def test_zero_loss_step1_on_runs_too_short_to_learn_checks_step_1_alone():
    # the real model's CPU check: 2 steps, β = 0.04 on both arms (no β = 0 run: every bnpo run counts)
    spec = _spec({"loss_type": ["grpo", "bnpo"]})
    grpo = [_run({"loss_type": "grpo", "seed": s}, loss1=0.0, grad1=0.8, max_steps=2, beta=0.04) for s in range(5)]
    bnpo = [_run({"loss_type": "bnpo", "seed": s}, loss1=-0.02, grad1=0.9, max_steps=2, beta=0.04) for s in range(5)]
    v = check_zero_loss_step1(spec, grpo + bnpo, {"statement": "s", "step1_only": True})
    assert v.verdict == "supported" and "learn" not in v.reason.split("; learning not checked")[0]
    assert "bnpo (β = 0.04; KL = 0 at step 1) has step-1 loss ≠ 0 in every run: yes" in v.reason
    assert v.reason.endswith("learning not checked (2-step runs)")
    assert check_zero_loss_step1(spec, grpo + bnpo, {"statement": "s"}).verdict == "contradicted"  # none learned
    flat = [_run({"loss_type": "grpo", "seed": 9}, loss1=0.0, grad1=0.0, max_steps=2, beta=0.04)]
    assert (
        check_zero_loss_step1(spec, grpo + flat + bnpo, {"statement": "s", "step1_only": True}).verdict
        == "contradicted"
    )
    # a first batch with all-equal rewards in every group (the real model answered nothing right):
    # advantages 0, so loss and gradient 0 under any aggregation: left out and counted, not a contradiction
    silent = [_run({"loss_type": t, "seed": 7}, loss1=0.0, grad1=0.0, max_steps=2, beta=0.04) for t in ("grpo", "bnpo")]
    for r in silent:
        r.metrics[0]["frac_reward_zero_std"] = 1.0
    v = check_zero_loss_step1(spec, grpo + bnpo + silent, {"statement": "s", "step1_only": True})
    assert v.verdict == "supported" and "2 run(s) left out of the gradient and bnpo checks" in v.reason
    assert "| loss_type=grpo | 6 | 0.00e+00 | 0.8 | 1 | 0/6 |" in v.table
    assert check_zero_loss_step1(spec, silent, {"statement": "s", "step1_only": True}).verdict == "inconclusive"


def test_the_full_report_points_to_the_real_models_cpu_report_whose_check_has_its_appendix(
    tmp_path, monkeypatch, summaries_as_given
):
    import shutil

    import sweeps.reporting.reproduce as reproduce

    monkeypatch.chdir(tmp_path)
    experiments = tmp_path / "experiments" / "real"
    (experiments / "cpu").mkdir(parents=True)
    for src in (ROOT / "experiments" / "real").glob("*.yaml"):
        shutil.copy(src, experiments / src.name)
    spec = yaml.safe_load((ROOT / "experiments" / "real" / "cpu" / "r1_step1_cpu.yaml").read_text())
    shutil.copy(ROOT / "experiments" / "real" / "cpu" / "r1_step1_cpu.yaml", experiments / "cpu" / "r1.yaml")
    runs = tmp_path / "results" / "real" / "cpu" / "runs" / spec["name"]
    for i, (loss_type, seed) in enumerate((t, s) for t in ("grpo", "bnpo") for s in range(5)):
        folder = runs / f"trial-{i:04d}"
        folder.mkdir(parents=True)
        config = {**spec["base"], "loss_type": loss_type, "seed": seed, "num_iterations": 1, "task": "addition"}
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        loss = 0.0 if loss_type == "grpo" else 0.013 * (seed + 1)
        (folder / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": step, "loss": loss, "grad_norm": 0.5, "reward": 0.1}) + "\n" for step in (1, 2))
        )
        (folder / "summary.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "learned": 0,
                    "steps_to_learn": None,
                    "final_reward": 0.1,
                    "baseline_reward": 0.1,
                }
            )
        )
    monkeypatch.setattr(reproduce, "REAL_EXPERIMENTS", experiments)
    monkeypatch.setattr(reproduce, "REAL_RESULTS", tmp_path / "results" / "real")
    monkeypatch.setattr(reproduce, "REAL_CPU_RESULTS", tmp_path / "results" / "real" / "cpu")
    sections, rows, found = reproduce._real_sections(tmp_path / "figures", tmp_path)
    # the full report: the GPU specs (not run), then a pointer to the CPU report, which alone prints its rows
    assert found == [] and "not run yet on a GPU" in sections[0] and sections[-1] == reproduce.REAL_CPU_ELSEWHERE
    gpu_rows = rows
    paths = reproduce.claim_specs(experiments / "cpu")
    sections, rows, found = reproduce.sections_with_echo_appendix(
        paths, paths, runs.parent, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert len(found) == 10
    # r1 rewards with math_answer, which pays for an echo of the question: its section is in the appendix
    text = "\n".join(sections)
    assert text.index("## Appendix: the real model on a CPU under a reward that pays for echoing") < text.index(
        "### C1 — r1"
    )
    assert sections[-1].startswith("### C1 — r1") and "**Verdict: supported**" in sections[-1]
    assert f"learning not checked ({spec['base']['max_steps']}-step runs)" in sections[-1]
    assert "discovery seeds 0–2; replication seeds 3, 4" in sections[-1]
    appendix_row = next(r for r in text.splitlines() if r.startswith("| appendix · C1 |"))
    assert "the step-1 loss is 0 under grpo while the gradient is not" in appendix_row
    assert _cells(appendix_row)[2:4] == ["**supported**", "–"]  # a step-1 check: no reward-AUC twin
    gpu_specs = len(list((ROOT / "experiments" / "real").glob("*.yaml")))  # the placebo and r1–r3
    assert not any("C1 | the step-1" in r for r in rows)  # not in the headline table
    assert sum("not run yet (needs a GPU)" in r for r in gpu_rows) == gpu_specs == 4


@pytest.fixture
def summaries_as_given(monkeypatch):
    """For tests of the verdicts' logic on synthetic run folders: their summaries state steps_to_learn,
    reward AUC and loss departure directly, with flat curves that would not produce them, so the
    report's check of each summary against its metrics.jsonl (tested in
    test_run_folders_that_are_not_this_specs_runs_are_named_not_counted) is set aside here."""
    import sweeps.reporting.report_inputs as report_inputs

    monkeypatch.setattr(report_inputs, "data_fault", lambda summary, metrics, config: None)


def _write_runs(runs_root, name, runs):
    """Finished run folders, as a sweep writes them, from (config, summary) pairs."""
    for i, (config, summary) in enumerate(runs):
        folder = runs_root / name / f"trial-{i:04d}"
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        (folder / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "loss": 0.0, "grad_norm": 0.1, "reward": 0.2}) + "\n" for s in range(1, 101))
        )
        (folder / "summary.json").write_text(
            json.dumps({"status": "finished", "baseline_reward": 0.2, "final_reward": 0.2, **summary})
        )


def _cells(row: str, k: int = 4) -> list[str]:
    """The first k cells of a summary row: claim, question, verdict, verdict on reward AUC."""
    return [c.strip() for c in row.strip("|").split("|")][:k]


@pytest.mark.parametrize("false_positive", [False, True])
def test_a_placebo_that_did_not_pass_withholds_every_verdict_on_steps_to_learn(
    tmp_path, false_positive, summaries_as_given
):
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(6)), "replication_seeds": list(range(6, 12)), "base": {"max_steps": 100}}
    paired = {"kind": "paired", "axis": "warmup_ratio", "treatment": [0.0], "control": 0.1, "direction": "lower"}
    (exp / "a_claim.yaml").write_text(
        json.dumps(
            {  # JSON is YAML, and shares no lists by anchors
                "name": "claim",
                "claim": "C2",
                "grid": {"warmup_ratio": [0.0, 0.1]},
                **sets,
                "report": {
                    "tests": [
                        {**paired, "statement": "sooner", "metric": "steps_to_learn"},
                        {**paired, "statement": "departs sooner", "metric": "loss_departure_step"},
                    ]
                },
            }
        )
    )
    (exp / "z_placebo.yaml").write_text(
        json.dumps(
            {
                "name": "placebo",
                "claim": "calibration",
                "grid": {"learning_rate": [1e-12]},
                **sets,
                "report": {"tests": [{"kind": "placebo", "statement": "never learns"}]},
            }
        )
    )
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    # every seed: warmup off learns 30 steps sooner, with a larger reward AUC, and departs 7 steps
    # sooner (6 of 6 pairs on each set)
    _write_runs(
        runs_root,
        "claim",
        [
            (
                {**config, "warmup_ratio": w, "seed": s},
                {
                    "steps_to_learn": 20 + s + 30 * (w > 0),
                    "learned": 1,
                    "reward_auc": 0.6 - 0.2 * (w > 0) + 0.01 * s,
                    "loss_departure_step": 3 + 7 * (w > 0),
                },
            )
            for s in range(12)
            for w in (0.0, 0.1)
        ],
    )
    _write_runs(
        runs_root,
        "placebo",
        [
            (
                {**config, "learning_rate": 1e-12, "seed": s},
                {
                    "steps_to_learn": 40 if false_positive and s == 7 else None,
                    "learned": int(false_positive and s == 7),
                },
            )
            for s in range(12)
        ],
    )
    paths = reproduce.claim_specs(exp)
    assert [p.stem for p in paths] == ["z_placebo", "a_claim"]  # the placebo first, whatever its file name
    sections, rows, runs = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert len(runs) == 36
    if not false_positive:
        assert [_cells(r) for r in rows] == [
            ["calibration", "never learns", "**supported**", "–"],
            ["C2", "sooner", "**supported**", "**supported**"],
            ["C2", "departs sooner", "**supported**", "–"],
        ]
        # the steps_to_learn row: 6 pairs per set, and a control that learned in all 12 runs (median 56)
        assert _cells(rows[1], 7)[4] == "6 and 6" and _cells(rows[1], 7)[6] == "55.5 (0/12)"
        return
    # 1 of 6 placebo runs learned on the replication set: the placebo is not passed, so the verdict that
    # reads steps_to_learn is withheld (its numbers stay in the section); the loss departure's and the
    # reward AUC's stand (the placebo calibrates steps_to_learn)
    assert [_cells(r) for r in rows] == [
        ["calibration", "never learns", "**not replicated**", "–"],
        ["C2", "sooner", "**inconclusive (placebo not passed)**", "**supported**"],
        ["C2", "departs sooner", "**supported**", "–"],
    ]
    assert (
        "steps_to_learn is not trusted here: the placebo (z_placebo) reads not replicated: 1 of its runs got a "
        "steps_to_learn; the runs alone read supported"
    ) in sections[1]
    assert "| warmup_ratio=0 | 12 | 12/12 | 25.5 [" in sections[1]  # median of 20–31


def test_reproduce_quick_writes_a_report_per_claim(tmp_path):
    exp = tmp_path / "experiments"
    exp.mkdir()
    for src in sorted((ROOT / "experiments").glob("c*.yaml")):
        data = yaml.safe_load(src.read_text())
        data["base"]["cache_dir"] = str(CACHE)  # reuse the cached tiny models
        (exp / src.name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    committed = ROOT / "results" / "REPORT.md"
    before = committed.read_bytes() if committed.exists() else None
    res = run_grpo(
        "reproduce",
        "--quick",
        "--max-steps",
        "6",
        "--seeds",
        "1",
        "--experiments",
        str(exp),
        "--out",
        str(tmp_path / "report"),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    report = (tmp_path / "report" / "REPORT.md").read_text()
    for claim in ("calibration", "positive_control", "C1", "C3", "C4"):  # the specs with a `quick` section
        assert f"## {claim} — " in report
    # the placebo first, then the positive control, then the claims
    assert report.index("## calibration — ") < report.index("## positive_control — ") < report.index("## C1 — ")
    # placebo 1, positive control 2 (steps and its reward-AUC twin), C1 1, C3 1 (its reward test needs the
    # full run), C4 2 (steps and reward AUC)
    assert report.count("**Verdict: ") == 7
    assert "discovery seeds 0; replication seeds" in report  # --seeds 1: one seed of each set
    needs_full = [line for line in report.splitlines() if "**needs the full run**" in line]
    assert {line.split(" | ")[0] for line in needs_full} == {"| calibration", "| C2", "| C3", "| C5", "| C6", "| C7"}
    assert len(needs_full) == 10  # placebo on repeat, C2 ×2, C3's reward test, C5 ×2, C6 ×2, C7 ×2
    entry = committed_bases()["addition"]  # every base used is printed with its checksum (--quick: addition)
    assert f"| addition | tiny | `{entry['sha256'][:16]}` |" in report
    assert "**CPU math:** reproducible (ATEN_CPU_CAPABILITY=avx2" in report and "num_threads 1 per run" in report
    assert "Machine:" in report and "torch" in report and "grpo reproduce --quick" in report
    figures = sorted((tmp_path / "report" / "figures").glob("*.png"))
    # placebo 1, positive control 1, C1 2, C3 2, C4 1 (addition only in --quick), and the forest plot
    assert len(figures) == 8 and (tmp_path / "report" / "figures" / "forest.png") in figures
    assert report.index("![Every claim's effect") < report.index("Generated by")  # the picture first
    for fig in figures:
        assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 5000
        assert f"figures/{fig.name}" in report
    assert (committed.read_bytes() if committed.exists() else None) == before  # never overwritten


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workers", "0"], "--workers"),
        (["--seeds", "0"], "--seeds"),
        (["--max-steps", "0"], "--max-steps"),
        (["--storage", "redis://x"], "unknown storage"),
        (["--tracking-uri", "ftp://x"], "unknown tracking store"),
        (["--experiments", str(ROOT / "README.md")], "README.md: is a file; allowed: a folder of claim specs"),
        (["--experiments", "/no/such/folder"], "--experiments /no/such/folder: no such folder; allowed"),
    ],
)
def test_reproduce_bad_input_writes_nothing(tmp_path, args, needle):
    res = run_grpo_here("reproduce", "--quick", "--out", str(tmp_path / "report"), *args, cwd=tmp_path)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no spec files, no stores, no report folder


def test_reproduce_retrains_lost_and_damaged_run_folders_and_names_them(tmp_path):
    # a deleted folder, a corrupt summary.json, a metrics.jsonl cut mid-record and a truncated
    # config.yaml: the rerun trains exactly those grid points again, and the report names each
    # damaged folder it left out instead of crashing or reporting fewer pairs in silence
    import json

    exp = tmp_path / "experiments"
    exp.mkdir()
    spec = yaml.safe_load((ROOT / "experiments" / "c4_advantage_scale.yaml").read_text())
    spec.update(seeds=[0, 1], replication_seeds=[2], grid={"advantage_scale": [1.0, 10.0]})
    spec["base"].update(cache_dir=str(CACHE), max_steps=4, stl_window=2, baseline_prompts=8)
    spec.pop("quick", None)
    (exp / "c4.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    args = ("reproduce", "--workers", "1", "--experiments", str(exp), "--out", str(tmp_path / "out"))
    assert run_grpo_here(*args, cwd=tmp_path).returncode == 0
    root = tmp_path / "out" / "runs" / spec["name"]
    folders = sorted(root.iterdir())
    assert len(folders) == 6
    shutil.rmtree(folders[0])
    (folders[1] / "summary.json").write_text('{"status": "fini')
    metrics = (folders[2] / "metrics.jsonl").read_text()
    (folders[2] / "metrics.jsonl").write_text(metrics[: len(metrics) - 40])
    (folders[3] / "config.yaml").write_text((folders[3] / "config.yaml").read_text()[:200])
    res = run_grpo_here(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "2 finished run folder(s)" in res.stdout  # folders 4 and 5

    def status(folder):
        try:
            return json.loads((folder / "summary.json").read_text())["status"]
        except (OSError, ValueError):
            return None

    finished = [f for f in root.iterdir() if status(f) == "finished"]
    assert len(finished) == 2 + 4 + 2  # kept, retrained, and the two damaged ones whose summary still reads
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "6 finished" in report and "no finished run" not in report
    for name, why in (
        (folders[1].name, "damaged: summary.json cut"),
        (folders[2].name, "damaged: metrics.jsonl cut"),
        (folders[3].name, "damaged: config.yaml"),
    ):
        assert f"{name} ({why}" in report, name
    # --report-only: the report from the folders as they are; a lost run is named, nothing trains
    shutil.rmtree(folders[4])
    before = sorted(p.name for p in root.iterdir())
    res = run_grpo_here(*args, "--report-only", cwd=tmp_path)
    assert res.returncode == 0 and sorted(p.name for p in root.iterdir()) == before, res.stderr[-2000:]
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "5 finished" in report and "1 of 6 grid points have no finished run" in report
    assert "grpo reproduce --report-only" in report


def test_report_only_without_the_local_runs_leaves_the_committed_report_alone(tmp_path):
    # a fresh clone has the committed results/REPORT.md but not the tiny models' runs (results/local/,
    # never committed): --report-only must not turn every verdict into "no finished runs yet"
    (tmp_path / "results").mkdir()
    committed = "# the committed report\n| C2 | ... | **supported** |\n"
    (tmp_path / "results" / "REPORT.md").write_text(committed)
    res = run_grpo_here("reproduce", "--report-only", "--experiments", str(ROOT / "experiments"), cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "holds no finished run" in line and "grpo reproduce --real-cpu --report-only" in line
    assert (tmp_path / "results" / "REPORT.md").read_text() == committed
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["REPORT.md"]  # nothing else written


def test_report_only_needs_no_model_folder_but_training_does(tmp_path):
    # a fresh clone has the real-model specs and their run folders but no results/local/models/:
    # --report-only trains nothing, so it builds no config and must not ask for the model folder;
    # a run that trains still stops at once with one line naming it
    exp = tmp_path / "experiments"
    exp.mkdir()
    shutil.copy(ROOT / "experiments/real/cpu/r5_loss_normalization_lengths_cpu.yaml", exp)
    base = yaml.safe_load((exp / "r5_loss_normalization_lengths_cpu.yaml").read_text())["base"]
    model = base["model"]
    (tmp_path / base["dataset"]).parent.mkdir(parents=True)  # the data a clone has (relative to its root)
    shutil.copy(ROOT / base["dataset"], tmp_path / base["dataset"])
    assert not (tmp_path / model).exists()  # the spec's relative model folder, seen from tmp_path
    args = ("reproduce", "--experiments", str(exp))
    res = run_grpo_here(*args, "--out", str(tmp_path / "trained"), cwd=tmp_path)
    assert (
        res.returncode == 2
        and res.stderr.strip()
        == f"grpo: error: model: no such directory {model!r}; allowed: 'tiny', a local model directory, or a hub id (org/name)"
    )
    assert not (tmp_path / "trained").exists()
    res = run_grpo_here(*args, "--report-only", "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    report = (tmp_path / "report" / "REPORT.md").read_text()
    assert "grpo reproduce --report-only" in report and "64 grid points" in report


def test_a_summary_that_is_not_a_mapping_is_named_damaged_and_a_killed_run_by_its_status(tmp_path):
    from sweeps.reporting.report_inputs import collect_runs

    spec = _spec({"learning_rate": [1e-4]}, seeds=3)
    for i, summary in enumerate(("[1, 2]", '{"status": "killed"}', "{}")):
        (tmp_path / "t" / f"trial-000{i}").mkdir(parents=True)
        (tmp_path / "t" / f"trial-000{i}" / "summary.json").write_text(summary)
    runs, left_out = collect_runs(tmp_path, spec)
    assert runs == [] and left_out == [
        "trial-0000 (damaged: summary.json not a mapping)",
        "trial-0001 (killed)",
        "trial-0002 (not finished)",
    ]


def test_a_test_that_names_no_metric_compares_steps_to_learn():
    """`metric` is optional (steps_to_learn); a spec without it trained every run and then crashed on
    a KeyError where the verdict was computed."""
    from sweeps.deciding.gates import rests_on_steps_to_learn
    from sweeps.deciding.verdicts import verdicts

    runs = [_run({"warmup_ratio": w, "seed": s}, stl=10 + s + (6 if w else 0)) for w in (0.0, 0.25) for s in range(10)]
    without = {k: v for k, v in WARMUP.items() if k != "metric"}
    named, unnamed = (verdicts(_spec({"warmup_ratio": [0.0, 0.25]}, tests=[t]), runs)[0] for t in (WARMUP, without))
    assert named.verdict == unnamed.verdict == "supported" and named.reason == unnamed.reason
    assert rests_on_steps_to_learn(without) and not rests_on_steps_to_learn({**WARMUP, "metric": "final_reward"})


def test_run_folders_that_are_not_this_specs_runs_are_named_not_counted(tmp_path):
    """A report counts a folder only as the run its spec trains at that point: a folder whose values
    are of the wrong type, outside the grid, from another config, or a second run of one point is
    left out and named (each was counted in silence, or crashed the report)."""
    from sweeps.reporting.report_inputs import collect_runs

    spec = SweepSpec(
        name="t",
        base={"max_steps": 2},
        grid={"beta": [0.0, 0.04]},
        seeds=[0, 1],
        replication_seeds=[2],
        report={"tests": []},
    )

    def folder(name, beta, seed, summary=None, steps=2, **config):
        path = tmp_path / "t" / name
        path.mkdir(parents=True)
        (path / "config.yaml").write_text(
            yaml.safe_dump({**spec.config_for({"beta": beta, "seed": seed}).to_dict(), **config})
        )
        (path / "summary.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "steps_completed": steps,
                    "steps_to_learn": None,
                    "baseline_reward": 0.5,
                    "final_reward": 0.5,
                    **(summary or {}),
                }
            )
        )
        (path / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": i, "reward": 0.5, "loss": 0.0}) + "\n" for i in range(1, steps + 1))
        )

    folder("trial-0000", 0.0, 0)
    folder("trial-0001", 0.04, 0, summary={"steps_to_learn": "abc"})
    folder("trial-0002", 0.04, 1, summary={"steps_completed": "2"})
    folder("trial-0003", 0.5, 1)  # a beta the grid does not have
    folder("trial-0004", 0.0, 1, learning_rate=0.5)  # another base: not this spec's run
    folder("trial-0005", 0.0, 2)
    folder("trial-0006", 0.0, 2)  # the same point again: the later is used
    folder("trial-0007", 0.04, 2, num_threads=7, run_name="x")  # where and how fast it ran: the same run
    folder("trial-0008", 0.04, 1, summary={"steps_completed": 1})  # its metrics.jsonl has 2 steps
    # a summary its own metrics.jsonl contradicts (older code's definitions, or an edit), or impossible for the spec
    folder("trial-0009", 0.0, 1, summary={"steps_to_learn": 1, "learned": 1})
    folder("trial-0010", 0.0, 1, summary={"final_reward": 7.0})
    folder("trial-0011", 0.0, 1, steps=0)
    folder("trial-0012", 0.0, 1, steps=3)
    runs, left_out = collect_runs(tmp_path, spec)
    assert sorted(r.folder.name for r in runs) == ["trial-0000", "trial-0006", "trial-0007"]
    assert left_out == [
        "trial-0001 (damaged: summary.json steps_to_learn is 'abc', not a number)",
        "trial-0002 (damaged: summary.json steps_completed is '2', not an integer)",
        "trial-0003 (not a point of this spec's grid: beta=0.5, seed=1)",
        "trial-0004 (another config: learning_rate 0.5, the spec's 0.0001)",
        "trial-0008 (damaged: metrics.jsonl has 2 step(s), summary.json's steps_completed 1)",  # was '2 of 1 steps'
        "trial-0009 (its data disagree: summary.json's steps_to_learn 1 is not what its metrics.jsonl gives (None))",
        "trial-0010 (its data disagree: summary.json's final_reward 7.0 is not what its metrics.jsonl gives (0.5))",
        "trial-0011 (its data disagree: metrics.jsonl has no steps)",
        "trial-0012 (its data disagree: 3 steps in a run of max_steps 2)",
        "trial-0005 (a second finished run of its point: trial-0006 is used)",
    ]


def test_summaries_edited_in_committed_run_folders_change_no_verdict(tmp_path, monkeypatch):
    """The committed positive control (SmolLM2, lr 1e-4 against 5e-5: "supported", 16 of 16 pairs
    faster), its folders copied. In two treatment runs of each seed set a summary is edited as older
    code or a careless hand leaves it: a steps_to_learn its curve never gives, a killed run's cut
    folder relabelled finished, a steps_completed that is not its metrics'. Taken at their word, the
    edits turn the steps_to_learn verdict around; the report names each edited folder and why, leaves it out, and
    its verdicts are those of the untouched runs."""
    from sweeps.reporting import report_inputs
    from sweeps.spec import load_spec

    spec = load_spec(ROOT / "experiments" / "real" / "cpu" / "r0_positive_control_room_cpu.yaml")
    source, root = ROOT / "results" / "real" / "cpu" / "runs" / spec.name, tmp_path / "runs"
    for folder in sorted(source.glob("trial-*")):
        if (folder / "summary.json").is_file():
            (root / spec.name / folder.name).mkdir(parents=True)
            for name in ("config.yaml", "metrics.jsonl", "summary.json"):
                shutil.copy(folder / name, root / spec.name / folder.name / name)

    def verdicts(runs):
        return [v.verdict for v, _ in replicated_verdicts(spec, runs)]

    runs, left_out = report_inputs.collect_runs(root, spec)
    assert len(runs) == 32 and left_out == [] and verdicts(runs) == ["supported", "supported"]
    treated = {r.config["seed"]: r.folder for r in runs if r.config["learning_rate"] == 1e-4}

    def edit(seed, **changes):
        path = treated[seed] / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    edit(1, steps_to_learn=38)  # discovery seeds: its curve learns at 17
    edit(8, steps_to_learn=38)  # replication seeds: at 9
    metrics = treated[3] / "metrics.jsonl"  # discovery: killed at step 12, relabelled finished and not learned
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:12]))
    edit(3, status="finished", steps_completed=12, steps_to_learn=None, learned=0)
    edit(12, steps_completed=400)  # replication: a count its metrics.jsonl does not have (40 steps)
    edited = sorted(treated[s].name for s in (1, 3, 8, 12))  # 6 pairs per set left: p can still be < 0.05

    with monkeypatch.context() as taken_at_their_word:
        taken_at_their_word.setattr(report_inputs, "data_fault", lambda summary, metrics, config: None)
        believed, _ = report_inputs.collect_runs(root, spec)
    assert verdicts(believed)[0] == "no effect detected"  # steps_to_learn's verdict, had the edits been believed

    kept, left_out = report_inputs.collect_runs(root, spec)
    assert sorted(r.folder.name for r in kept) == sorted(r.folder.name for r in runs if r.folder.name not in edited)
    reasons = {line.split(" ")[0]: line for line in left_out}
    assert sorted(reasons) == edited
    assert "summary.json's steps_to_learn 38 is not what its metrics.jsonl gives (17)" in reasons[treated[1].name]
    assert "finished after 12 of its max_steps 40 steps" in reasons[treated[3].name]
    assert "metrics.jsonl has 40 step(s), summary.json's steps_completed 400" in reasons[treated[12].name]
    assert verdicts(kept) == ["supported", "supported"]


def _bad_reports():
    tests = [
        {
            "kind": "paired",
            "statement": "s",
            "metric": "steps_to_learn",
            "axis": "advantage_scale",
            "treatment": [10.0],
            "control": 1.0,
            "direction": "lower",
        }
    ]
    return [
        ({"tests": "paired"}, "report.tests"),
        ({"tests": ["paired"]}, "report.tests"),
        ({"tests": [{**tests[0], "treatment": 10.0}]}, "treatment"),
        ({"tests": [{**tests[0], "metric": "happiness"}]}, "metric"),
        ({"tests": [{**tests[0], "metric": ["steps_to_learn"]}]}, "metric"),
        ({"tests": [{**tests[0], "axis": ["advantage_scale"]}]}, "axis"),
        ({"tests": tests, "figures": "reward"}, "figures"),
        ({"tests": [{**tests[0], "kind": ["paired"]}]}, "kind"),
        ({"tests": [{k: v for k, v in tests[0].items() if k != "statement"}]}, "tests[0].statement: None; allowed"),
        ({"tests": [{**tests[0], "statement": " "}]}, "tests[0].statement: ' '; allowed"),
    ]


@pytest.mark.parametrize("report, needle", _bad_reports(), ids=[f"{i}-{n}" for i, (_, n) in enumerate(_bad_reports())])
def test_a_bad_report_section_is_refused_before_anything_trains(tmp_path, report, needle):
    exp = tmp_path / "experiments"
    exp.mkdir()
    spec = yaml.safe_load((ROOT / "experiments" / "c4_advantage_scale.yaml").read_text())
    spec.update(grid={"advantage_scale": [1.0, 10.0]}, report=report)
    (exp / "c4.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    res = run_grpo_here("reproduce", "--experiments", str(exp), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()


def test_a_quick_section_of_the_wrong_type_and_an_unwritable_report_folder_are_one_line(tmp_path):
    exp = tmp_path / "experiments"
    exp.mkdir()
    spec = yaml.safe_load((ROOT / "experiments" / "c4_advantage_scale.yaml").read_text())
    spec["quick"] = [1, 2]
    (exp / "c4.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    res = run_grpo_here("reproduce", "--quick", "--experiments", str(exp), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 2 and "quick" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    (exp / "c4.yaml").write_text((ROOT / "experiments" / "c4_advantage_scale.yaml").read_text())
    res = run_grpo_here("reproduce", "--experiments", str(exp), "--out", "/proc/grpo-report", cwd=tmp_path)
    assert res.returncode == 2 and "cannot write" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_real_models_section_shows_what_it_wrote_at_its_first_and_last_step(tmp_path):
    import dataclasses

    from sweeps.reporting.report import completions_table

    runs = []
    for arm in (0.0, 0.25):
        for seed in (1, 0):
            folder = tmp_path / f"{arm}-{seed}"
            folder.mkdir()
            (folder / "completions.jsonl").write_text(
                "".join(
                    json.dumps(
                        {
                            "step": step,
                            "prompt": f"What is 2 + {i}?",
                            "completion": f"s{seed} {step}.{i}|x\nend",
                            "reward": float(i % 2),
                            "rewards/math_answer": float(i % 2),
                            "advantage": 0.0,
                            "length": 3,
                            "truncated": False,
                        }
                    )
                    + "\n"
                    for step in (1, 2, 3)
                    for i in range(4)
                )
            )
            runs.append(dataclasses.replace(_run({"warmup_ratio": arm, "seed": seed}, model="SmolLM2"), folder=folder))
    lines = completions_table(_spec({"warmup_ratio": [0.0, 0.25]}), runs)
    rows = [line for line in lines if line.startswith("| warmup_ratio")]
    assert len(rows) == 2 * 2 * 2  # 2 variants × (step 1, step 3) × 2 completions
    assert all("| 0 |" in row for row in rows) and not any("s1 " in row for row in rows)  # the lowest seed
    assert {row.split(" | ")[2] for row in rows} == {"1", "3"}
    assert "`s0 1.0/x ⏎ end`" in lines[4]  # a table cell: | and newlines made visible, not breaking it
    tiny = [dataclasses.replace(r, config={**r.config, "model": "tiny"}) for r in runs]
    assert completions_table(_spec({"warmup_ratio": [0.0, 0.25]}), tiny) == []
    # damaged lines (a cut tail, a record of another shape, a completion that is not text) are left
    # out and counted under the table; a file with nothing usable left gives only that note
    with open(runs[1].folder / "completions.jsonl", "a") as f:
        f.write('{"x": 1}\n[1]\n{"step": 3, "prompt": "p", "completion": null, "reward": 1}\n{"step": 3, "pro')
    lines = completions_table(_spec({"warmup_ratio": [0.0, 0.25]}), runs)
    assert len([line for line in lines if line.startswith("| warmup_ratio")]) == 8
    assert (
        f"- {runs[1].folder.name}/completions.jsonl: 4 line(s) left out (cut, unreadable or not a completion "
        f"record)" in lines
    )
    (runs[1].folder / "completions.jsonl").write_bytes(b"\xff\xfe not text")
    (runs[3].folder / "completions.jsonl").write_text("[1]\n")
    assert completions_table(_spec({"warmup_ratio": [0.0, 0.25]}), runs) == [
        f"- {runs[1].folder.name}/completions.jsonl: 1 line(s) left out (cut, unreadable or not a completion record)",
        f"- {runs[3].folder.name}/completions.jsonl: 1 line(s) left out (cut, unreadable or not a completion record)",
        "",
    ]


def test_a_difference_that_rounds_to_zero_prints_as_plus_zero():
    from sweeps.deciding.verdicts import _fmt_num

    assert [_fmt_num(v, "steps_to_learn") for v in (-0.0, -0.25, 0.4, -0.6)] == [
        "+0",
        "+0",
        "+0",
        "−1",
    ]  # the minus sign, not a hyphen
    assert [_fmt_num(v, "final_reward") for v in (-0.0001, 0.0125, float("-inf"))] == ["+0.000", "+0.013", "−unbounded"]


def _a_null_claim(exp, runs_root, sets, config):
    """A C4 spec whose scale changes nothing: each seed learns at the same step (± 1, alternating)
    in both arms, so its test reads no effect detected where the gates let it."""
    (exp / "a_claim.yaml").write_text(
        json.dumps(
            {
                "name": "claim",
                "claim": "C4",
                "grid": {"advantage_scale": [1.0, 2.0]},
                **sets,
                "report": {
                    "tests": [
                        {
                            "kind": "paired",
                            "axis": "advantage_scale",
                            "treatment": [2.0],
                            "control": 1.0,
                            "direction": "lower",
                            "statement": "scaling learns sooner",
                        }
                    ]
                },
            }
        )
    )
    _write_runs(
        runs_root,
        "claim",
        [
            (
                {**config, "advantage_scale": a, "seed": s},
                {
                    "steps_to_learn": 40 + (s + (a > 1)) % 2,
                    "learned": 1,
                    "reward_auc": 0.5 + 0.01 * ((s + (a > 1)) % 2),
                },
            )
            for s in range(16)
            for a in (1.0, 2.0)
        ],
    )


@pytest.mark.parametrize("control", ["absent", "passes", "fails"])
def test_no_effect_detected_stands_only_on_a_testbed_whose_positive_control_passed(
    tmp_path, control, summaries_as_given
):
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16)), "base": {"max_steps": 100}}
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    _a_null_claim(exp, runs_root, sets, config)
    if control != "absent":  # 16 of 16 pairs 20 steps sooner, or the same ± 1
        _a_control(exp, runs_root, sets, config, gap=20 if control == "passes" else 0)
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    claim_row = _cells(rows[-1])
    if control == "passes":
        assert _cells(rows[0]) == [
            "positive_control",
            "a larger learning rate learns sooner",
            "**supported**",
            "**supported**",
        ]
        assert claim_row[2:] == ["**no effect detected**", "**no effect detected**"]
        return
    word = "no positive control" if control == "absent" else "positive control not passed"
    assert claim_row[2:] == [f"**inconclusive ({word})**"] * 2
    # what the runs alone read stays in the reason, with the effect sizes they allow
    assert "the runs alone read no effect detected" in sections[-1] and "is ruled out" in sections[-1]
    if control == "fails":
        assert _cells(rows[0])[2] == "**no effect detected**"
        assert "the positive control (b_positive) reads no effect detected" in sections[-1]


@pytest.mark.parametrize("graded", ["complete", "still training"])
def test_a_graded_positive_control_gates_by_its_larger_step_once_all_its_runs_are_in(
    tmp_path, graded, summaries_as_given
):
    # a second positive control, ×4 detected and ×2 not: it gates open (the testbed detects ×4's
    # effect); while some of its runs are missing, the first control (which failed here) keeps the gate
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16)), "base": {"max_steps": 100}}
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    test = {"kind": "paired", "axis": "learning_rate", "control": 1e-4, "direction": "lower"}
    _a_null_claim(exp, runs_root, sets, config)
    for name, grid, gaps in (
        ("positive", [1e-4, 4e-4], {4e-4: 0}),
        ("positive-graded", [1e-4, 2e-4, 4e-4], {2e-4: 0, 4e-4: 20}),
    ):
        (exp / f"{'c' if 'graded' in name else 'b'}_{name}.yaml").write_text(
            json.dumps(
                {  # the graded one after
                    "name": name,
                    "claim": "positive_control",
                    "grid": {"learning_rate": grid},
                    **sets,
                    "report": {
                        "tests": [
                            {**test, "treatment": [lr], "statement": f"learning rate {lr} learns sooner"}
                            for lr in grid[:0:-1]
                        ]
                    },
                }
            )
        )
        seeds = range(15 if name == "positive-graded" and graded == "still training" else 16)
        _write_runs(
            runs_root,
            name,
            [
                (
                    {**config, "learning_rate": lr, "seed": s},
                    {
                        "steps_to_learn": 40 + (s + (lr > 1e-4)) % 2 - gaps.get(lr, 0),
                        "learned": 1,
                        "reward_auc": 0.5 + 0.01 * gaps.get(lr, 0) + 0.001 * ((s + (lr > 1e-4)) % 2),
                    },
                )
                for s in seeds
                for lr in grid
            ],
        )
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    if graded == "complete":
        assert [_cells(r)[2] for r in rows[1:3]] == ["**supported**", "**no effect detected**"]
        assert _cells(rows[-1])[2:] == ["**no effect detected**", "**no effect detected**"]
        # its section says so, with the effect sizes it detected on each seed set; the first one's, that it handed over
        assert "- **Gate:** handed to `c_positive-graded`" in sections[0] and "**Gate:** open" not in sections[0]
        gate = sections[1][sections[1].index("- **Gate:** open") : sections[1].index("**Verdict")]
        assert gate.splitlines()[1:] == [
            "  - learning rate 0.0004 learns sooner: steps_to_learn **supported** (disc. −20 [−21, −19]; repl. −20 "
            "[−21, −19] steps); reward AUC **supported** (disc. +0.200 [+0.199, +0.201]; repl. +0.200 [+0.199, +0.201])",
            "  - learning rate 0.0002 learns sooner: steps_to_learn **no effect detected** (disc. +0 [−1, +1]; repl. +0 "
            "[−1, +1] steps); reward AUC **no effect detected** (disc. +0.000 [−0.001, +0.001]; repl. +0.000 "
            "[−0.001, +0.001])",
            "",
        ]
        return
    assert "the gate of *no effect detected* stays `b_positive`'s" in sections[1]
    assert "- **Gate:** closed: the positive control (b_positive) reads no effect detected" in sections[0]
    assert _cells(rows[-1])[2:] == ["**inconclusive (positive control not passed)**"] * 2
    assert "the positive control (b_positive) reads no effect detected" in sections[-1]


def test_a_spec_still_training_reads_inconclusive_and_opens_no_gate(tmp_path, summaries_as_given):
    # the positive control with 3 of its 32 runs not finished (still training): what its 13 full pairs read
    # (supported) is kept in the reason, but it is not the spec's verdict, so the claim's "no effect
    # detected" stays withheld; once every run is in, both stand
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16)), "base": {"max_steps": 100}}
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    _a_null_claim(exp, runs_root, sets, config)
    (exp / "b_positive.yaml").write_text(
        json.dumps(
            {
                "name": "positive",
                "claim": "positive_control",
                "grid": {"learning_rate": [1e-4, 4e-4]},
                **sets,
                "report": {
                    "tests": [
                        {
                            "kind": "paired",
                            "axis": "learning_rate",
                            "treatment": [4e-4],
                            "control": 1e-4,
                            "direction": "lower",
                            "statement": "a larger learning rate learns sooner",
                        }
                    ]
                },
            }
        )
    )
    runs = [
        (
            {**config, "learning_rate": lr, "seed": s},
            {
                "steps_to_learn": 40 + (s + (lr > 1e-4)) % 2 - 20 * (lr > 1e-4),
                "learned": 1,
                "reward_auc": 0.5 + 0.2 * (lr > 1e-4) + 0.001 * ((s + (lr > 1e-4)) % 2),
            },
        )
        for s in range(16)
        for lr in (1e-4, 4e-4)
    ]
    _write_runs(
        runs_root, "positive", [r for r in runs if not (r[0]["seed"] in (6, 7, 15) and r[0]["learning_rate"] > 1e-4)]
    )
    paths = reproduce.claim_specs(exp)

    def rows_and_sections():
        sections, rows, _ = reproduce._sections(
            paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
        )
        return rows, sections

    rows, sections = rows_and_sections()
    assert _cells(rows[0])[2:] == ["**inconclusive (29 of 32 runs finished)**"] * 2
    assert (
        "3 of the spec's 32 runs have not finished" in sections[0]
        and "the finished runs alone read supported" in sections[0]
    )
    assert _cells(rows[-1])[2:] == ["**inconclusive (positive control not passed)**"] * 2
    assert "the positive control (b_positive) reads inconclusive (29 of 32 runs finished)" in sections[-1]
    shutil.rmtree(runs_root / "positive")
    _write_runs(runs_root, "positive", runs)
    rows, _ = rows_and_sections()
    assert _cells(rows[0])[2:] == ["**supported**"] * 2 and _cells(rows[-1])[2:] == ["**no effect detected**"] * 2


def test_a_placebo_gates_only_the_claims_of_its_own_set_up(tmp_path, summaries_as_given):
    # two set-ups: addition (with a placebo that learned once: not passed) and reverse (no placebo run at
    # all, its placebo spec not trained yet); a claim on addition is withheld by its own placebo, a claim
    # on reverse by the missing one, and a failing placebo of addition says nothing about reverse
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(6)), "replication_seeds": list(range(6, 12))}
    paired = {
        "kind": "paired",
        "axis": "warmup_ratio",
        "treatment": [0.0],
        "control": 0.1,
        "direction": "lower",
        "statement": "sooner",
        "metric": "steps_to_learn",
    }
    for task in ("addition", "reverse"):
        base = {"max_steps": 100, "task": task}
        (exp / f"c_{task}.yaml").write_text(
            json.dumps(
                {
                    "name": f"claim-{task}",
                    "claim": "C2",
                    "grid": {"warmup_ratio": [0.0, 0.1]},
                    **sets,
                    "base": base,
                    "report": {"tests": [paired]},
                }
            )
        )
        (exp / f"p_{task}.yaml").write_text(
            json.dumps(
                {
                    "name": f"placebo-{task}",
                    "claim": "calibration",
                    "grid": {"learning_rate": [1e-12]},
                    **sets,
                    "base": base,
                    "report": {"tests": [{"kind": "placebo", "statement": f"never learns ({task})"}]},
                }
            )
        )
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05}
    for task in ("addition", "reverse"):
        _write_runs(
            runs_root,
            f"claim-{task}",
            [
                (
                    {**config, "task": task, "warmup_ratio": w, "seed": s},
                    {"steps_to_learn": 20 + s + 30 * (w > 0), "learned": 1, "reward_auc": 0.6 - 0.2 * (w > 0)},
                )
                for s in range(12)
                for w in (0.0, 0.1)
            ],
        )
    _write_runs(
        runs_root,
        "placebo-addition",
        [
            (
                {**config, "task": "addition", "learning_rate": 1e-12, "seed": s},
                {"steps_to_learn": 40 if s == 7 else None, "learned": int(s == 7)},
            )
            for s in range(12)
        ],
    )
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    verdicts = {c[1]: c[2] for c in map(_cells, rows)}
    assert verdicts["never learns (addition)"] == "**not replicated**"
    assert verdicts["never learns (reverse)"] == "**no finished runs yet**"
    claims = [_cells(r) for r in rows if r.startswith("| C2 ")]
    assert all(c[2] == "**inconclusive (placebo not passed)**" and c[3] == "**supported**" for c in claims)
    addition = next(t for t in sections if "## C2 — c_addition" in t)
    reverse = next(t for t in sections if "## C2 — c_reverse" in t)
    assert "the placebo (p_addition) reads not replicated" in addition
    assert "no placebo has finished runs of this set-up (" in reverse and "task reverse" in reverse
    assert "p_addition" not in reverse  # another set-up's placebo is not this claim's
    # the reverse placebo's runs arrive and pass: the reverse claim stands, the addition claim stays withheld
    _write_runs(
        runs_root,
        "placebo-reverse",
        [
            ({**config, "task": "reverse", "learning_rate": 1e-12, "seed": s}, {"steps_to_learn": None, "learned": 0})
            for s in range(12)
        ],
    )
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert [c[2] for c in map(_cells, rows) if c[0] == "C2"] == [
        "**inconclusive (placebo not passed)**",
        "**supported**",
    ]  # addition, reverse
    # a longer placebo of reverse's set-up, in training (1 of its 12 runs finished), covers the claim's
    # 100 steps too: it stands aside until it is complete, unless one of its runs learns
    (exp / "p_reverse_long.yaml").write_text(
        json.dumps(
            {
                "name": "placebo-reverse-long",
                "claim": "calibration",
                "grid": {"learning_rate": [1e-12]},
                **sets,
                "base": {"max_steps": 200, "task": "reverse"},
                "report": {"tests": [{"kind": "placebo", "statement": "never learns (reverse, 200 steps)"}]},
            }
        )
    )
    long_config = {**config, "max_steps": 200, "task": "reverse", "learning_rate": 1e-12}
    _write_runs(
        runs_root, "placebo-reverse-long", [({**long_config, "seed": 0}, {"steps_to_learn": None, "learned": 0})]
    )
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert [c[2] for c in map(_cells, rows) if c[0] == "C2"] == [
        "**inconclusive (placebo not passed)**",
        "**supported**",
    ]
    shutil.rmtree(runs_root / "placebo-reverse-long")
    _write_runs(
        runs_root, "placebo-reverse-long", [({**long_config, "seed": 0}, {"steps_to_learn": 150, "learned": 1})]
    )
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert [c[2] for c in map(_cells, rows) if c[0] == "C2"] == ["**inconclusive (placebo not passed)**"] * 2
    reverse = next(t for t in sections if "## C2 — c_reverse" in t)
    assert "the placebo (p_reverse_long) reads" in reverse and "1 of its runs got a steps_to_learn" in reverse


def test_claims_under_a_reward_that_pays_for_an_echo_go_to_an_appendix(tmp_path):
    from sweeps.reporting.reproduce import rewards_of_spec, sections_with_echo_appendix

    def spec(name, claim, rewards):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "name": name,
                    "claim": claim,
                    "base": {"max_steps": 4, "reward_funcs": rewards},
                    "grid": {"beta": [0.0, 0.1]},
                    "seeds": [0],
                    "replication_seeds": [1],
                    "report": {
                        "tests": [
                            {
                                "kind": "paired",
                                "statement": f"{name} learns sooner",
                                "axis": "beta",
                                "treatment": [0.1],
                                "control": 0.0,
                                "direction": "lower",
                            }
                        ]
                    },
                }
            )
        )
        return path

    strict, echo = spec("strict", "C2", ["last_number"]), spec("echo", "C3", ["math_answer"])
    assert rewards_of_spec(strict) == {"last_number"} and rewards_of_spec(echo) == {"math_answer"}
    paths = [echo, strict]
    sections, rows, _ = sections_with_echo_appendix(
        paths, paths, tmp_path / "runs", tmp_path / "fig", tmp_path, "test", check_points=False
    )
    assert [r.split(" | ")[1] for r in rows] == ["strict learns sooner"]  # the headline table: strict rewards only
    text = "\n".join(sections)
    assert text.index("## C2 — strict") < text.index("## Appendix") < text.index("### C3 — echo")
    assert "| appendix · C3 | echo learns sooner |" in text and "\n## C3" not in text


def test_the_timing_line_says_when_the_runs_were_trained_in_parts():
    from sweeps.reporting.summary import timing_lines

    whole = {"wall_time_s": 600.0, "date": "2026-11-26", "runs_before": 0}
    assert timing_lines(whole, 1500.0, 2, False) == [
        "this full reproduction: 10.0 min wall (2026-11-26, training every run of this report)"
    ]
    # the last invocation trained beside 256 finished folders: it did not train every run
    lines = timing_lines({**whole, "runs_before": 256}, 1500.0, 2, False)
    assert lines[0].startswith("the runs were trained in parts; together they ran 25.0 min")
    assert lines[1] == "the last part: 10.0 min wall (2026-11-26, beside 256 finished run folders it took as done)"
    assert not any("every run" in line for line in lines)
    assert timing_lines({**whole, "wall_time_s": None}, 1500.0, 2, True)[0].endswith(
        "12.5 min of wall time on 2 workers)"
    )
    # the full report beside the real model's committed runs: this invocation trained the testbed's only
    lines = timing_lines(whole, 1500.0, 2, False, committed_time=900.0, committed_runs=3)
    assert lines == [
        "this full reproduction: 10.0 min wall (2026-11-26, training every run of the CPU testbed's claims)",
        "the real model's 3 runs were trained in parts and read from their committed folders (together "
        "15.0 min, the sum of their wall_time_s)",
    ]


def test_a_section_made_on_two_mkl_branches_says_which_runs_were_made_where():
    """C5 with room for lengths was trained on an Intel Xeon and then on an AMD EPYC: the section
    counts each CPU's runs per variant, and says why it matters (its own branch reproduces a run);
    runs of one CPU, or of two CPUs on one branch, say nothing of it."""
    from sweeps.reporting.report import made_on

    spec = _spec({"loss_type": ["grpo", "dapo"]}, seeds=3)
    intel = {"device_name": "Intel(R) Xeon(R) Processor", "mkl_branch": "AVX2"}
    amd = {"device_name": "AMD EPYC", "mkl_branch": "AUTO"}
    runs = [_run({"loss_type": arm, "seed": seed}, stl=10) for arm in ("grpo", "dapo") for seed in range(3)]
    for run in runs:
        run.summary.update(amd if run.point["loss_type"] == "grpo" and run.point["seed"] > 0 else intel)
    line = made_on(spec, runs)
    assert line.startswith(
        "AMD EPYC (MKL branch AUTO): 2 runs (loss_type=grpo 2); Intel(R) Xeon(R) Processor "
        "(MKL branch AVX2): 4 runs (loss_type=dapo 3, loss_type=grpo 1)."
    )
    assert "part from step 1" in line
    for run in runs:
        run.summary.update(intel)
    assert made_on(spec, runs) == ""
    runs[0].summary["device_name"] = "Intel(R) Xeon(R) Gold 6338"  # another Intel model: named, same branch
    line = made_on(spec, runs)
    assert "Gold 6338 (MKL branch AVX2): 1 runs" in line and "part from step 1" not in line
    del runs[1].summary["mkl_branch"]  # a run from before branches were recorded: unknown, not a second branch
    line = made_on(spec, runs)
    assert "Intel(R) Xeon(R) Processor (MKL branch not recorded): 1 runs (loss_type=grpo 1)" in line
    assert "part from step 1" not in line


def test_the_quick_placebo_covers_every_quick_claims_horizon():
    """`grpo reproduce --quick` gates each claim on a placebo of its set-up over at least as many steps:
    a quick placebo shorter than a quick claim left that claim "inconclusive (placebo not passed)" in
    a newcomer's first report (C4's 80 steps against the placebo's 60)."""
    from sweeps.reporting.reproduce import claim_specs

    def horizon_and_tasks(path):
        data = yaml.safe_load(path.read_text())
        quick = data.get("quick") or {}
        tasks = (
            (quick.get("grid") or {}).get("task")
            or (data.get("grid") or {}).get("task")
            or [(data.get("base") or {}).get("task", "addition")]
        )
        return quick.get("max_steps", 50), set(tasks), data.get("claim")

    # the specs --quick trains: those with a quick section (the others wait for a full run)
    specs = [
        horizon_and_tasks(p) for p in claim_specs(ROOT / "experiments") if yaml.safe_load(p.read_text()).get("quick")
    ]
    placebos = [(steps, tasks) for steps, tasks, claim in specs if claim == "calibration"]
    assert placebos
    for steps, tasks, claim in specs:
        if claim != "calibration":
            assert any(tasks & p_tasks and p_steps >= steps for p_steps, p_tasks in placebos), (claim, steps, tasks)


def test_an_arm_added_while_training_leaves_the_tests_of_finished_arms_decided(tmp_path, summaries_as_given):
    # a third level added to a grid after the other two finished (C2's lr_matched_early):
    # the test of the two finished levels keeps its verdict; the test that reads the new level reads
    # inconclusive with its own count of finished points, not the spec's
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16)), "base": {"max_steps": 100}}
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    (exp / "a_claim.yaml").write_text(
        json.dumps(
            {
                "name": "claim",
                "claim": "C2",
                "grid": {"learning_rate": [1e-4, 4e-4, 2e-4]},
                **sets,
                "report": {
                    "tests": [
                        {
                            "kind": "paired",
                            "axis": "learning_rate",
                            "treatment": [4e-4],
                            "control": 1e-4,
                            "direction": "lower",
                            "statement": "four times the rate learns sooner",
                        },
                        {
                            "kind": "paired",
                            "axis": "learning_rate",
                            "treatment": [2e-4],
                            "control": 1e-4,
                            "direction": "lower",
                            "statement": "twice the rate learns sooner",
                        },
                    ]
                },
            }
        )
    )
    runs = [
        (
            {**config, "learning_rate": lr, "seed": s},
            {
                "steps_to_learn": 40 + (s + (lr > 1e-4)) % 2 - 20 * (lr > 1e-4),
                "learned": 1,
                "reward_auc": 0.5 + 0.2 * (lr > 1e-4) + 0.001 * ((s + (lr > 1e-4)) % 2),
            },
        )
        for s in range(16)
        for lr in (1e-4, 4e-4, 2e-4)
    ]
    _write_runs(runs_root, "claim", [r for r in runs if not (r[0]["learning_rate"] == 2e-4 and r[0]["seed"] > 2)])
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert _cells(rows[0])[2:] == ["**supported**"] * 2
    assert _cells(rows[1])[2:] == ["**inconclusive (19 of 32 runs finished)**"] * 2
    assert "13 of the spec's 32 runs have not finished" in sections[0]
    assert "**13 of 48 grid points have no finished run**" in sections[0]


def _a_control(exp, runs_root, sets, config, gap=20):
    """A positive control whose ×4 learning rate learns `gap` steps sooner (0: the same ± 1)."""
    (exp / "b_positive.yaml").write_text(
        json.dumps(
            {
                "name": "positive",
                "claim": "positive_control",
                "grid": {"learning_rate": [1e-4, 4e-4]},
                **sets,
                "report": {
                    "tests": [
                        {
                            "kind": "paired",
                            "axis": "learning_rate",
                            "treatment": [4e-4],
                            "control": 1e-4,
                            "direction": "lower",
                            "statement": "a larger learning rate learns sooner",
                        }
                    ]
                },
            }
        )
    )
    _write_runs(
        runs_root,
        "positive",
        [
            (
                {**config, "learning_rate": lr, "seed": s},
                {
                    "steps_to_learn": 40 + (s + (lr > 1e-4)) % 2 - gap * (lr > 1e-4),
                    "learned": 1,
                    "reward_auc": 0.5 + 0.01 * gap * (lr > 1e-4) + 0.001 * ((s + (lr > 1e-4)) % 2),
                },
            )
            for s in range(16)
            for lr in (1e-4, 4e-4)
        ],
    )


@pytest.mark.parametrize("other", ["max_completion_length", "max_steps"])
def test_a_null_of_another_set_up_than_the_positive_controls_reads_inconclusive(tmp_path, other, summaries_as_given):
    # the control passed, but on another set-up: a longer completion cap, or fewer steps than the
    # claim's runs (a 100-step regime is not the 40-step control's): it says nothing about what this
    # claim's runs can detect
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16)), "base": {"max_steps": 100}}
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    _a_null_claim(exp, runs_root, sets, config)
    changed = {"max_completion_length": 64} if other == "max_completion_length" else {"max_steps": 60}
    _a_control(exp, runs_root, {**sets, "base": {"max_steps": 100, **changed}}, {**config, **changed})
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert _cells(rows[0])[2:] == ["**supported**"] * 2
    assert _cells(rows[-1])[2:] == ["**inconclusive (no positive control of this set-up)**"] * 2
    assert "no known effect has finished runs of this set-up" in sections[-1]
    assert "the runs alone read no effect detected" in sections[-1]


@pytest.mark.parametrize("shown", [True, False])
def test_a_declared_known_effect_gates_the_nulls_of_its_own_set_up(tmp_path, shown, summaries_as_given):
    # no positive-control spec covers the claim's set-up, but the claim spec declares one of its own
    # tests its regime's known effect (C2's ×1.11 in the long regime): where that test reads
    # supported on steps and AUC, the spec's null stands; where it does not, the null is withheld
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16)), "base": {"max_steps": 100}}
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    _a_control(exp, runs_root, {**sets, "base": {"max_steps": 60}}, {**config, "max_steps": 60})
    (exp / "c_claim.yaml").write_text(
        json.dumps(
            {
                "name": "claim",
                "claim": "C2",
                "grid": {"learning_rate": [1e-4, 1.1e-4, 2e-4]},
                **sets,
                "report": {
                    "tests": [
                        {
                            "kind": "paired",
                            "axis": "learning_rate",
                            "treatment": [1.1e-4],
                            "control": 1e-4,
                            "direction": "lower",
                            "statement": "a tenth more rate learns sooner",
                        },
                        {
                            "kind": "paired",
                            "axis": "learning_rate",
                            "treatment": [2e-4],
                            "control": 1e-4,
                            "direction": "lower",
                            "statement": "twice the rate learns sooner",
                            "known_effect": True,
                        },
                    ],
                    "margins": {"steps": 2},
                },
            }
        )
    )
    gap = 20 if shown else 0
    _write_runs(
        runs_root,
        "claim",
        [
            (
                {**config, "learning_rate": lr, "seed": s},
                {
                    "steps_to_learn": 40 + (s + (lr > 1e-4)) % 2 - gap * (lr > 1.5e-4),
                    "learned": 1,
                    "reward_auc": 0.5 + 0.01 * gap * (lr > 1.5e-4) + 0.001 * ((s + (lr > 1e-4)) % 2),
                },
            )
            for s in range(16)
            for lr in (1e-4, 1.1e-4, 2e-4)
        ],
    )
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    null, known = _cells(rows[-2]), _cells(rows[-1])
    if shown:
        assert known[2:] == ["**supported**"] * 2
        assert null[2:] == ["**equivalent within ±2 steps**", "**no effect detected**"]
        assert "*Known effect:* declared as this set-up's evidence" in sections[-1]
        # the margin is printed beside what the known effect moved, so "within ±2" reads in context
        assert (
            "; beside the known effect of this set-up: twice the rate learns sooner: steps_to_learn -20 and -20, "
            "reward AUC +0.2 and +0.2 (`c_claim: twice the rate learns sooner`)"
        ) in sections[-1]
    else:
        assert null[2:] == ["**inconclusive (positive control not passed)**"] * 2
        assert (
            "the known effect of this set-up (twice the rate learns sooner) reads equivalent within ±2 steps"
            in sections[-1]
        )


def test_a_superseded_regime_comes_after_the_current_ones_with_its_own_table(tmp_path, summaries_as_given):
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16)), "base": {"max_steps": 100}}
    config = {"max_steps": 100, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    _a_control(exp, runs_root, sets, config)
    _a_null_claim(exp, runs_root, sets, config)  # a_claim.yaml: C4, read first
    spec = json.loads((exp / "a_claim.yaml").read_text())
    spec["report"].update(superseded_by="b_positive", mechanism_none="the test reads the mechanism itself")
    (exp / "a_claim.yaml").write_text(json.dumps(spec))
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert [_cells(r)[0] for r in rows] == ["positive_control"]  # the first table: current regimes only
    assert sections[-2].startswith("## Superseded regimes") and "| C4 | scaling learns sooner |" in sections[-2]
    assert sections[-1].startswith("## C4 — a_claim\n\n*Superseded by `b_positive`: kept for the record")
    assert "- **Mechanism check:** none applies: the test reads the mechanism itself" in sections[-1]


def test_mechanism_none_is_text_and_never_beside_a_check(tmp_path):
    from grpo_core.util.errors import UserInputError
    from sweeps.report_spec import validate_report
    from sweeps.spec import load_spec

    base = {
        "name": "x",
        "claim": "C4",
        "grid": {"advantage_scale": [1.0, 2.0]},
        "seeds": [0, 1],
        "replication_seeds": [2, 3],
        "report": {
            "tests": [
                {
                    "kind": "paired",
                    "axis": "advantage_scale",
                    "treatment": [2.0],
                    "control": 1.0,
                    "direction": "lower",
                    "statement": "s",
                }
            ]
        },
    }
    check = {"what": "w", "reason": "r", "metric": "grad_norm", "at_least": 0}
    for extra, needle in (
        ({"mechanism_none": ""}, "mechanism_none: ''; allowed: text"),
        ({"mechanism_none": "why", "mechanism": [check]}, "beside report.mechanism"),
    ):
        path = tmp_path / "s.yaml"
        path.write_text(json.dumps({**base, "report": {**base["report"], **extra}}))
        with pytest.raises(UserInputError, match=re.escape(needle)):
            validate_report(load_spec(path, check_points=False))


@pytest.mark.parametrize(
    "report, needle",
    [
        ({"margins": {"steps": float("inf")}}, "margins.steps: inf; allowed: a finite number > 0"),
        ({"margins": {"reward_auc": float("nan")}}, "margins.reward_auc: nan; allowed: a finite number > 0"),
        (
            {"mechanism": [{"what": "w", "reason": "r", "metric": "grad_norm", "at_least": float("nan")}]},
            "allowed: exactly one of at_least, at_most, a finite number",
        ),
        (
            {"mechanism": [{"what": "w", "reason": "r", "metric": "grad_norm", "at_most": float("inf")}]},
            "allowed: exactly one of at_least, at_most, a finite number",
        ),
        ({"statement": "scaling | learns sooner"}, "allowed: one line without '|'"),
        ({"statement": "scaling\nlearns sooner"}, "allowed: one line without '|'"),
    ],
)
def test_declarations_that_are_not_finite_or_break_a_table_are_refused_in_one_line(tmp_path, report, needle):
    # an infinite margin printed "equivalent within ±inf steps"; a NaN threshold was accepted; a '|' or
    # a newline in a statement broke the summary row and the results' tables
    from grpo_core.util.errors import UserInputError
    from sweeps.report_spec import validate_report
    from sweeps.spec import load_spec

    test = {
        "kind": "paired",
        "axis": "advantage_scale",
        "treatment": [2.0],
        "control": 1.0,
        "direction": "lower",
        "statement": report.pop("statement", "scaling learns sooner"),
    }
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "x",
                "claim": "C4",
                "grid": {"advantage_scale": [1.0, 2.0]},
                "seeds": [0, 1],
                "replication_seeds": [2, 3],
                "report": {"tests": [test], **report},
            }
        )
    )  # .inf and .nan as YAML writes them
    with pytest.raises(UserInputError, match=re.escape(needle)) as caught:
        validate_report(load_spec(path, check_points=False))
    assert "\n" not in str(caught.value)


def test_a_null_is_read_beside_the_known_effect_of_its_own_horizon_not_a_longer_regimes(tmp_path, summaries_as_given):
    # a 60-step control that failed and a 100-step known effect of the same set-up that passed: the
    # 60-step claim's null rests on the 60-step control (the closest regime at or above its steps),
    # so it is withheld; a longer regime's success does not vouch for it
    import sweeps.reporting.reproduce as reproduce

    exp, runs_root = tmp_path / "experiments", tmp_path / "runs"
    exp.mkdir()
    sets = {"seeds": list(range(8)), "replication_seeds": list(range(8, 16))}
    config = {"max_steps": 60, "stl_window": 20, "stl_delta": 0.05, "task": "addition"}
    _a_control(exp, runs_root, {**sets, "base": {"max_steps": 60}}, config, gap=0)
    (exp / "c_long.yaml").write_text(
        json.dumps(
            {
                "name": "long",
                "claim": "C2",
                "grid": {"learning_rate": [1e-4, 2e-4]},
                **sets,
                "base": {"max_steps": 100},
                "report": {
                    "tests": [
                        {
                            "kind": "paired",
                            "axis": "learning_rate",
                            "treatment": [2e-4],
                            "control": 1e-4,
                            "direction": "lower",
                            "statement": "twice the rate learns sooner",
                            "known_effect": True,
                        }
                    ]
                },
            }
        )
    )
    _write_runs(
        runs_root,
        "long",
        [
            (
                {**config, "max_steps": 100, "learning_rate": lr, "seed": s},
                {
                    "steps_to_learn": 40 + (s + (lr > 1e-4)) % 2 - 20 * (lr > 1e-4),
                    "learned": 1,
                    "reward_auc": 0.5 + 0.2 * (lr > 1e-4) + 0.001 * ((s + (lr > 1e-4)) % 2),
                },
            )
            for s in range(16)
            for lr in (1e-4, 2e-4)
        ],
    )
    (exp / "d_claim.yaml").write_text(
        json.dumps(
            {
                "name": "claim",
                "claim": "C4",
                "grid": {"advantage_scale": [1.0, 2.0]},
                **sets,
                "base": {"max_steps": 60},
                "report": {
                    "tests": [
                        {
                            "kind": "paired",
                            "axis": "advantage_scale",
                            "treatment": [2.0],
                            "control": 1.0,
                            "direction": "lower",
                            "statement": "scaling learns sooner",
                        }
                    ]
                },
            }
        )
    )
    _write_runs(
        runs_root,
        "claim",
        [
            (
                {**config, "advantage_scale": a, "seed": s},
                {
                    "steps_to_learn": 40 + (s + (a > 1)) % 2,
                    "learned": 1,
                    "reward_auc": 0.5 + 0.01 * ((s + (a > 1)) % 2),
                },
            )
            for s in range(16)
            for a in (1.0, 2.0)
        ],
    )
    paths = reproduce.claim_specs(exp)
    sections, rows, _ = reproduce._sections(
        paths, paths, runs_root, tmp_path / "figures", tmp_path, "cmd", check_points=False
    )
    assert _cells(rows[1])[2:] == ["**supported**"] * 2  # the 100-step known effect
    assert _cells(rows[-1])[2:] == ["**inconclusive (positive control not passed)**"] * 2
    assert "the positive control (b_positive) reads no effect detected" in sections[-1]
