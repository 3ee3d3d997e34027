"""The verdicts of a claim on one seed set, as data: paired and differ tests by seed (exact
signed-rank, Friedman, Hodges-Lehmann), Holm within a test, the placebo and step-1 checks. Each
Verdict carries its statement, verdict, reason, table and facts; sweeps/deciding/replication.py combines
the two seed sets' verdicts, and sweeps/reporting/report.py renders them."""

from __future__ import annotations

import math
import statistics as pystats
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from . import statistics as st
from .statistics import ALPHA
from grpo_core.record.run_metrics import CENSORED as RUN_CENSORED, first_crossing_step

from .runs import LR_UNIT, Run, _label
from ..report_spec import NOTE_KINDS, compared_metric, report_tests

if TYPE_CHECKING:  # a type only: the sweep spec builds configs (torch); the verdicts read its data
    from ..spec import SweepSpec


def _variant_key(spec: SweepSpec, run: Run, exclude: tuple = ()) -> tuple:
    return tuple((a, run.point[a]) for a in spec.grid if a not in exclude)


def _fmt_steps(v: float) -> str:
    if math.isnan(v):
        return "–"
    return "not learned" if math.isinf(v) else f"{v:g}"


def _group(spec: SweepSpec, runs: list[Run], exclude: tuple = (), every: tuple = ()) -> dict[tuple, list[Run]]:
    """The runs by grid point without the seed (and the axes `exclude` names), sorted by the points'
    values; each key `every` names is there, its list empty where no run has it."""
    groups: dict[tuple, list[Run]] = {key: [] for key in every}
    for r in runs:
        groups.setdefault(_variant_key(spec, r, exclude), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: [str(v) for _, v in kv[0]]))


# ---- tables -------------------------------------------------------------------------------------


SUPPORTED, CONTRADICTED, NO_EFFECT, INCONCLUSIVE = "supported", "contradicted", "no effect detected", "inconclusive"
EQUIVALENT = "equivalent within"  # "equivalent within ±2 steps": a null whose 90% intervals lie inside the declared margin
EQUIVALENCE_CONFIDENCE = 0.90  # two one-sided tests at α = 0.05 each: the 90% interval inside ±margin
TOO_FEW_SEEDS = f"{INCONCLUSIVE} (too few seeds)"
NOT_REPLICATED = "not replicated"  # significant on one seed set, not (or the other way) on the other
# "supported, but inside the margin ±0.03": significant on both sets, yet every 90% interval lies inside the
# margin declared before the runs as no practical effect (a real effect, smaller than what was said to matter)
INSIDE_MARGIN = ", but inside the margin"


@dataclass
class Verdict:
    statement: str
    verdict: str
    reason: str
    table: str
    comparisons: list = field(default_factory=list)  # paired / differ tests: one per stratum and treatment
    facts: dict = field(default_factory=dict)  # paired and differ tests on both sets: n per set, detectable, control
    checks: list = field(default_factory=list)  # the manipulation checks that gate it (mechanism.MechanismResult)
    sets: list = field(default_factory=list)  # paired tests on two seed sets: (set name, its comparisons) per set
    sequential: str = ""  # under a declared sequential design: where the test stands (sequential.test_reading)


def is_supported(verdict: str) -> bool:
    """A verdict that says the claimed effect shows on every comparison, inside its margin or not:
    what the positive control needs to show the testbed can detect an effect."""
    return verdict == SUPPORTED or verdict.startswith(SUPPORTED + INSIDE_MARGIN)


def is_null(verdict: str) -> bool:
    """A verdict that says the arms did not differ: what the positive control and the mechanism
    checks gate (a null is only worth something where the testbed could have shown an effect)."""
    return verdict == NO_EFFECT or verdict.startswith(EQUIVALENT)


@dataclass
class Comparison:
    label: str
    n_pairs: int
    estimate: float  # Hodges-Lehmann paired difference (treatment − control)
    low: float
    high: float
    p: float
    best_p: float  # the smallest p these pair counts allow
    informative: bool  # a censored metric: at least one run of the pairs reached it
    p_adj: float = math.nan
    outcome: str = ""  # SUPPORTED / CONTRADICTED / "" after Holm
    low90: float = math.nan  # the 90% interval (equivalence: two one-sided tests at 0.05 each)
    high90: float = math.nan
    diffs: list = field(default_factory=list)  # the paired differences tested (censored ones capped)
    blocks: list = field(default_factory=list)  # differ tests: per seed its value at each level (capped)


def _by_seed(group: list[Run], axis: str, levels: list, metric: str) -> tuple[list, list[list[float]]]:
    """The seeds that ran every one of `levels` of `axis`, and per seed the values of `metric` at
    each level (rows: seeds; columns: levels): the blocks every paired test is computed on."""
    table: dict = {}
    for r in group:
        table.setdefault(r.point["seed"], {})[repr(r.point[axis])] = r.value(metric)
    seeds = sorted(s for s, v in table.items() if all(repr(lv) in v for lv in levels))
    return seeds, [[table[s][repr(lv)] for lv in levels] for s in seeds]


def _paired(spec: SweepSpec, group: list[Run], axis: str, level, control, metric: str) -> tuple[list, list]:
    """Values of `metric` for the seeds run at both levels: (treated, control), seed order."""
    _, blocks = _by_seed(group, axis, [level, control], metric)
    blocks = [b for b in blocks if not any(math.isnan(v) for v in b)]  # a run without the metric: no pair
    return [b[0] for b in blocks], [b[1] for b in blocks]


# the censored metrics the verdicts read: a run's own, and the learning rate it was given before it
# learned (claim C2: the ramp withholds rate; runs.py: lr_to_learn)
CENSORED = (*RUN_CENSORED, "lr_to_learn")


def _horizon(runs: list[Run], metric: str) -> float:
    """Where a censored metric is capped: max_steps for the step metrics; for completions_to_learn
    (claim C6: dynamic sampling generates more per step) the fewest completions any of these runs
    generated, the count every one of them was observed for."""
    if metric == "completions_to_learn":
        return min((r.summary.get("completions_generated", math.inf) for r in runs), default=0)
    if metric == "lr_to_learn":  # likewise: the least learning rate any of these runs was given in all
        return min((sum(m.get("learning_rate", 0.0) for m in r.metrics) / LR_UNIT for r in runs), default=0)
    return runs[0].config["max_steps"] if runs else 0


_HORIZON_TEXT = {"completions_to_learn": "the fewest generated", "lr_to_learn": "the least given in all"}


def _unit(metric: str) -> str:
    if metric == "completions_to_learn":
        return "completions"
    if metric == "lr_to_learn":
        return f"steps at {LR_UNIT:g}"
    return "steps" if metric in CENSORED else metric


def _compare(label: str, treated: list[float], control: list[float], metric: str, horizon: float) -> Comparison:
    """Paired comparison on seeds; censored metrics are capped at the horizon (st.capped)."""
    informative = True
    if metric in CENSORED:
        informative = any(not math.isinf(v) for v in [*treated, *control])
        treated, control = st.capped(treated, horizon), st.capped(control, horizon)
    d = [t - c for t, c in zip(treated, control)]
    est, lo, hi = st.hodges_lehmann(d)
    _, lo90, hi90 = st.hodges_lehmann(d, EQUIVALENCE_CONFIDENCE)
    return Comparison(label, len(d), est, lo, hi, st.signed_rank_test(d), st.smallest_signed_rank_p(len(d)),
                      informative, diffs=d, low90=lo90, high90=hi90)


def _holm_outcomes(comparisons: list[Comparison], direction: Optional[str]) -> None:
    """Holm within the test; a significant comparison supports the claim when its estimate points
    the claimed way (direction lower: treatment − control < 0), else contradicts it."""
    for c, p_adj in zip(comparisons, st.holm([c.p for c in comparisons])):
        c.p_adj = p_adj
        if math.isnan(p_adj) or p_adj >= ALPHA or not c.informative:
            continue
        if direction is None:
            c.outcome = SUPPORTED
        else:
            towards = c.estimate < 0 if direction == "lower" else c.estimate > 0
            c.outcome = SUPPORTED if towards else CONTRADICTED


def _fmt_num(v: float, metric: str, outward: int = 0) -> str:
    """A value to whole steps (a step metric) or 3 decimals: to the nearest (outward 0), or, for an
    interval's bound, away from its estimate (−1 a lower bound, down; +1 an upper bound, up), so that
    the printed interval holds the computed one: [0, +0.5] prints as [+0, +1], never [+0, +0]."""
    if math.isnan(v):  # no pairs to bound it (a spec still training)
        return "–"
    if math.isinf(v):
        return "unbounded" if v > 0 else "−unbounded"
    digits = 0 if metric in CENSORED else 3
    scale = 10 ** digits
    if outward < 0:
        v = math.floor(v * scale + 1e-9) / scale  # 1e-9: a bound that is a whole step in float error stays one
    elif outward > 0:
        v = math.ceil(v * scale - 1e-9) / scale
    text = f"{round(v, digits) + 0.0:+.{digits}f}"  # + 0.0: a value that rounds to −0 prints as +0
    return text.replace("-", "−")  # the minus sign, as "−unbounded" and the prose write it


def fmt_interval(estimate: float, low: float, high: float, metric: str) -> str:
    """A paired difference with its interval, "+1 [−2, +3]", the bounds rounded outward; "–"
    without pairs to estimate from."""
    if math.isnan(estimate):
        return "–"
    return f"{_fmt_num(estimate, metric)} [{_fmt_num(low, metric, -1)}, {_fmt_num(high, metric, +1)}]"


def _allowed(comparisons: list[Comparison], direction: Optional[str], metric: str) -> str:
    """The largest effect the 95% intervals still allow, in the claimed direction (or either), and
    which comparison allows it when there are several."""
    def amount(v: float) -> str:
        if metric not in CENSORED:
            return f"{v:.3g}"
        unit = _unit(metric)
        return f"{v:.3g} {unit[:-1] if f'{v:.3g}' == '1' and unit.endswith('s') else unit}"

    def which(worst: Comparison) -> str:
        return f" (largest allowed: {worst.label})" if len(comparisons) > 1 else ""

    if direction == "lower":
        worst = min(comparisons, key=lambda c: c.low)
        what = "a speed-up" if metric in CENSORED else f"a decrease of {metric}"
        if worst.low >= 0:  # every interval starts at 0 or above: no effect in the claimed direction is allowed
            return f"any {what[2:]} is ruled out (every 95% interval's lower end is ≥ 0)"
        return f"{what} of more than {amount(-worst.low)} is ruled out{which(worst)}"
    if direction == "higher":
        worst = max(comparisons, key=lambda c: c.high)
        if worst.high <= 0:
            return f"any increase of {metric} is ruled out (every 95% interval's upper end is ≤ 0)"
        return f"an increase of {metric} of more than {amount(worst.high)} is ruled out{which(worst)}"
    worst = max(comparisons, key=lambda c: max(-c.low, c.high))
    return f"a paired difference larger than {amount(max(-worst.low, worst.high))} is ruled out{which(worst)}"


def _mean_caveat(comparisons: list[Comparison]) -> str:
    """What "ruled out" may not be read as: the interval bounds the Hodges-Lehmann shift (a typical
    pair's difference); where resampling these differences shows it missing their mean more often
    than its 95% allows (mostly ties and a few large pairs), a larger mean effect is not ruled out."""
    low = [(c, cov) for c in comparisons
           if (cov := st.hodges_lehmann_coverage(c.diffs, 0.95)) < 0.95 - st.COVERAGE_SLACK]
    if not low:
        return ""
    worst = min(cov for _, cov in low)
    return (f" (for the typical pair, the Hodges-Lehmann shift: resampling these differences, the 95% interval "
            f"covers their mean in only {worst:.0%} of draws, so a larger mean effect, carried by a few pairs, is "
            f"not ruled out)")


def _verdict(statement: str, comparisons: list[Comparison], direction: Optional[str], metric: str,
             table: str, extra: str = "") -> Verdict:
    m = len(comparisons)
    if not comparisons:
        return Verdict(statement, INCONCLUSIVE, "no paired runs to compare", table)
    if not any(c.best_p * m < ALPHA for c in comparisons):
        best = min(c.best_p for c in comparisons)
        return Verdict(statement, TOO_FEW_SEEDS,
                       f"with {max(c.n_pairs for c in comparisons)} seeds per comparison the smallest possible p is "
                       f"{best:.3g}, and Holm over {m} comparison(s) needs p < {ALPHA / m:.3g}", table, comparisons)
    informative = [c for c in comparisons if c.informative]
    if not informative:
        return Verdict(statement, INCONCLUSIVE, "no run in either arm reached the metric within max_steps", table,
                       comparisons)
    sup = [c.label for c in comparisons if c.outcome == SUPPORTED]
    con = [c.label for c in comparisons if c.outcome == CONTRADICTED]
    counts = f"{len(sup)} of {m} comparisons significant in the claimed direction, {len(con)} in the opposite"
    counts += f" (two-sided, Holm-adjusted p < {ALPHA})"
    if sup or con:
        verdict = _phrase(m, [(SUPPORTED, sup), (CONTRADICTED, con)])
    else:
        if any(math.isinf(c.low) or math.isinf(c.high) for c in informative):
            return Verdict(statement, INCONCLUSIVE, counts + "; the 95% intervals are unbounded with these pair "
                           "counts", table, comparisons)
        verdict = NO_EFFECT
        counts += "; " + _allowed(informative, direction, metric) + _mean_caveat(informative)
    uninformative = m - len(informative)
    if uninformative:
        counts += f"; {uninformative} comparison(s) had no run that learned in either arm"
    return Verdict(statement, verdict, counts + extra, table, comparisons)


def _phrase(m: int, kinds: list[tuple[str, list[str]]]) -> str:
    """A verdict from the comparisons of each outcome: one word when all m share it, else the
    strata named ("supported only under A; contradicted under B")."""
    present = [(word, labels) for word, labels in kinds if labels]
    if len(present) == 1 and len(present[0][1]) == m:
        return present[0][0]
    parts = []
    for i, (word, labels) in enumerate(present):
        only = " only" if i == 0 and word in (SUPPORTED, CONTRADICTED) else ""
        parts.append(f"{word}{only} under {'; '.join(labels)}")
    return "; ".join(parts)


def _claimed(test: dict, comparisons: list[Comparison]) -> tuple[str, list[str]]:
    """The magnitude the claim's source states, as a paired difference: ruled out where the 95%
    interval excludes it. Returns (sentence, per-comparison cells)."""
    if "claimed_effect" not in test:
        return "", ["" for _ in comparisons]
    claimed = float(test["claimed_effect"])
    cells = ["ruled out" if not (c.low <= claimed <= c.high) else "not ruled out" for c in comparisons]
    text = test.get("claimed_effect_text", f"a paired difference of {claimed:g}")
    return (f"; the source's magnitude ({text}, a paired difference of {claimed:+g}) is ruled out by the 95% "
            f"interval in {cells.count('ruled out')} of {len(cells)} comparisons"), cells


def fmt_value(v: float, metric: str) -> str:
    """A median or value of a metric: whole steps as they are ("not learned" where never), any other
    metric to 3 decimals; "–" where there is none."""
    if metric in CENSORED:
        return _fmt_steps(v)
    return "–" if math.isnan(v) else f"{v:.3f}"


def noise_loss_floor(runs: list[Run], test: dict) -> str:
    """Claim C3's loss-departure test holds by construction: with μ = 1 the grpo loss is
    −mean_i(A_i) + β·KL, the standardized A_i sum to 0 per group, so noise of std σ on B
    advantages (scaled by advantage_scale) alone moves the step loss by N(0, (σ·scale/√B)²)."""
    treated = [r for r in runs if r.point[test["axis"]] in test["treatment"]]
    if not treated:
        return ""
    cfg = treated[0].config
    sd = cfg["advantage_noise_std"] * cfg["advantage_scale"] / math.sqrt(cfg["prompts_per_step"] * cfg["num_generations"])
    if sd == 0:
        return ""
    from scipy.stats import norm

    p = 2 * norm.sf(cfg["loss_departure_eps"] / sd)
    return (f"; by construction: the noise alone moves each step's loss by a N(0, {sd:.2g}²) term, so |loss| > ε = "
            f"{cfg['loss_departure_eps']:g} at each step with probability {p:.2f} (departure expected by step "
            f"{1 / p:.1f}) whatever the model learns{'' if cfg['loss_type'] == 'grpo' else ' (approximately, for ' + cfg['loss_type'] + ')'}")


def zero_std_share(runs: list[Run], test: dict) -> str:
    """Claim C6's premise, measured: the share of step-1 groups with all-equal rewards (the
    first round's, as drawn: every arm samples the same step-1 prompts from the same base), and
    what dynamic sampling cost in completions."""
    control = [r for r in runs if r.point[test["axis"]] == test["control"] and r.metrics]
    if not control:
        return ""
    step1 = sorted(r.metrics[0]["frac_reward_zero_std"] for r in control)
    text = (f"; at step 1, {st.median(step1):.0%} of the groups had all-equal rewards (median over the "
            f"{len(step1)} control runs, range {step1[0]:.0%}-{step1[-1]:.0%})")
    for level in test["treatment"]:
        arm = [r for r in runs if r.point[test["axis"]] == level and r.summary.get("completions_generated")]
        if arm and control[0].summary.get("completions_generated"):
            ratio = st.median([r.summary["completions_generated"] for r in arm]) / st.median(
                [r.summary["completions_generated"] for r in control])
            time = st.median([r.summary["train_time_s"] for r in arm]) / st.median(
                [r.summary["train_time_s"] for r in control])
            text += (f"; {test['axis']}={level} generated {ratio:.2f}× the control's completions over the run "
                     f"and took {time:.2f}× its training time (median; a timing, so not a verdict)")
    return text


NOTES = {"noise_loss_floor": noise_loss_floor, "zero_std_share": zero_std_share}
assert tuple(NOTES) == NOTE_KINDS


def check_paired(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """Each treatment against the control on the seeds both ran, in every stratum of the other
    axes: two-sided Wilcoxon signed-rank test, Hodges-Lehmann paired difference with its exact
    95% interval, Holm across the test's comparisons."""
    axis, metric, direction = test["axis"], compared_metric(test), test.get("direction")
    comparisons, medians = [], []
    for stratum, group in _group(spec, runs, exclude=(axis,)).items():
        for treatment in test["treatment"]:
            treated, control = _paired(spec, group, axis, treatment, test["control"], metric)
            label = _label(stratum) or "all runs"
            if len(test["treatment"]) > 1:
                label += f" ({axis}={treatment})"
            comparisons.append(_compare(label, treated, control, metric, _horizon(group, metric)))
            medians.append((st.median(treated), st.median(control)))
    _holm_outcomes(comparisons, direction)
    extra, claimed_cells = _claimed(test, comparisons)
    note = NOTES[test["note"]](runs, test) if test.get("note") else ""
    unit = (f"{_unit(metric)}, never-learned runs at "
            f"{_HORIZON_TEXT.get(metric, 'max_steps')}" if metric in CENSORED
            else metric)
    head = (f"| comparison | pairs | median {metric} | control ({axis}={test['control']}) | paired difference "
            f"[95% CI] ({unit}) | p | Holm p | outcome |" + (" claimed magnitude |" if extra else ""))
    lines = [head, "|" + "---|" * (9 if extra else 8)]
    for c, (mt, mc), cell in zip(comparisons, medians, claimed_cells):
        lines.append(f"| {c.label} | {c.n_pairs} | {fmt_value(mt, metric)} | {fmt_value(mc, metric)} | "
                     f"{fmt_interval(c.estimate, c.low, c.high, metric)} | "
                     f"{c.p:.3g} | {c.p_adj:.3g} | {c.outcome or '–'} |" + (f" {cell} |" if extra else ""))
    return _verdict(test["statement"], comparisons, direction, metric, "\n".join(lines), extra + note)


def check_differ(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """The levels of `axis` on the seeds that ran them all, in every stratum: Friedman's test
    (seeds as blocks; two levels: signed-rank), Holm across strata; each level's paired
    difference to the first level with its 95% interval."""
    axis, metric = test["axis"], compared_metric(test)
    levels = spec.grid[axis]
    comparisons, rows = [], []
    for stratum, group in _group(spec, runs, exclude=(axis,)).items():
        seeds, blocks = _by_seed(group, axis, levels, metric)
        informative = metric not in CENSORED or any(not math.isinf(v) for b in blocks for v in b)
        if metric in CENSORED:
            blocks = [st.capped(b, _horizon(group, metric)) for b in blocks]
        p = st.friedman_test(blocks)
        best = st.smallest_friedman_p(len(seeds), len(levels))
        effects = []
        for k in range(1, len(levels)):
            est, lo, hi = st.hodges_lehmann([b[k] - b[0] for b in blocks])
            effects.append((levels[k], est, lo, hi))
        widest = max(effects, key=lambda e: max(-e[2], e[3]))
        label = _label(stratum) or "all runs"
        comparisons.append(Comparison(label, len(seeds), widest[1], widest[2], widest[3],
                                      1.0 if math.isnan(p) else p, best, informative, blocks=blocks))
        rows.append((stratum, seeds, blocks, effects))
    _holm_outcomes(comparisons, None)
    ref = levels[0]
    lines = [f"| stratum | seeds | medians of {metric} by {axis} | paired difference to {axis}={ref} [95% CI] | "
             f"Friedman p | Holm p | outcome |", "|---|---|---|---|---|---|---|"]
    for c, (_stratum, seeds, blocks, effects) in zip(comparisons, rows):
        meds = ", ".join(f"{lv}: {fmt_value(st.median([b[k] for b in blocks]) if blocks else math.nan, metric)}"
                         for k, lv in enumerate(levels))
        diffs = "; ".join(f"{lv}: {fmt_interval(e, lo, hi, metric)}"
                          for lv, e, lo, hi in effects)
        lines.append(f"| {c.label} | {len(seeds)} | {meds} | {diffs} | {c.p:.3g} | {c.p_adj:.3g} | {c.outcome or '–'} |")
    return _verdict(test["statement"], comparisons, None, metric, "\n".join(lines))


def check_placebo(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """The calibration check: runs that cannot learn (learning rate so small that no weight
    moves) must never get a steps_to_learn. Per stratum: false positives, with the exact
    one-sided 95% upper bound on the false-positive rate."""
    lines = ["| stratum | runs | learned (false positives) | 95% upper bound on the rate | first crossing, no "
             "sustain check (the first version) | baseline ± SE | final reward − baseline (mean) |",
             "|---|---|---|---|---|---|---|"]
    total = fp = 0
    for stratum, group in _group(spec, runs).items():
        learned = sum(r.summary.get("learned", 0) for r in group)
        crossed = sum(first_crossing_step([m["reward"] for m in r.metrics], r.summary["baseline_reward"],
                                          r.config["stl_window"], r.config["stl_delta"]) is not None for r in group)
        total, fp = total + len(group), fp + learned
        base = pystats.mean(r.summary["baseline_reward"] for r in group)
        se = max(r.summary.get("baseline_reward_se", math.nan) for r in group)
        gap = pystats.mean(r.summary["final_reward"] - r.summary["baseline_reward"] for r in group)
        lines.append(f"| {_label(stratum) or 'all runs'} | {len(group)} | {learned} | "
                     f"{st.clopper_pearson_upper(learned, len(group)):.2f} | {crossed} of {len(group)} | "
                     f"{base:.3f} ± {se:.4f} | {gap:+.3f} |")
    if not total:  # a seed set none of whose runs has finished says nothing either way
        return Verdict(test["statement"], INCONCLUSIVE, "no finished placebo runs", "\n".join(lines))
    verdict = SUPPORTED if fp == 0 else CONTRADICTED
    reason = (f"{fp} of {total} placebo runs got a steps_to_learn; the false-positive rate is below "
              f"{st.clopper_pearson_upper(fp, total):.2f} (exact one-sided 95% bound)")
    return Verdict(test["statement"], verdict, reason, "\n".join(lines))


def _signal_at_step1(run: Run) -> bool:
    """Some group of the first batch had unequal rewards: with all-equal rewards every advantage is
    0, so loss and gradient are 0 whatever the aggregation, and the run says nothing about C1."""
    return run.metrics[0].get("frac_reward_zero_std", 0.0) < 1.0


def check_zero_loss_step1(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """Claim C1 from the runs' first step: grpo loss |·| ≤ 1e-6 with grad_norm > 0, the reward
    still rises (at least half the grpo runs learn; not checked with `step1_only`, for runs too
    short to learn), and bnpo has a non-zero loss: the runs with β = 0 where the grid has them
    (#2995), else every bnpo run (at step 1 the reference is the starting policy, so KL = 0).
    Runs whose first batch had no reward variance at all (_signal_at_step1) are left out of the
    gradient and bnpo checks, and counted."""
    grpo = [r for r in runs if r.config["loss_type"] == "grpo" and r.config["num_iterations"] == 1]
    bnpo = [r for r in runs if r.config["loss_type"] == "bnpo"]
    bnpo0 = [r for r in bnpo if r.config["beta"] == 0] or bnpo
    lines = ["| variant | n | max abs(loss) at step 1 | min grad_norm at step 1 | no reward variance at step 1 | learned |",
             "|---|---|---|---|---|---|"]
    for key, group in _group(spec, runs).items():
        losses = [abs(r.metrics[0]["loss"]) for r in group]
        grads = [r.metrics[0]["grad_norm"] for r in group if _signal_at_step1(r)]
        silent = sum(not _signal_at_step1(r) for r in group)
        learned = sum(r.summary["learned"] for r in group)
        lines.append(f"| {_label(key)} | {len(group)} | {max(losses):.2e} | {f'{min(grads):.3g}' if grads else '–'} | "
                     f"{silent} | {learned}/{len(group)} |")
    informative = [r for r in grpo if _signal_at_step1(r)]
    zero = bool(grpo) and max(abs(r.metrics[0]["loss"]) for r in grpo) <= 1e-6
    grad = bool(informative) and min(r.metrics[0]["grad_norm"] for r in informative) > 0
    learns = bool(grpo) and sum(r.summary["learned"] for r in grpo) / len(grpo) >= 0.5
    bnpo_live = [r for r in bnpo0 if _signal_at_step1(r)]
    bnpo_nonzero = bool(bnpo_live) and min(abs(r.metrics[0]["loss"]) for r in bnpo_live) > 1e-6
    checks = [("grpo step-1 |loss| ≤ 1e-6", zero), ("grpo step-1 grad_norm > 0", grad)]
    if not test.get("step1_only"):
        checks.append(("at least half the grpo runs learn", learns))
    verdict = SUPPORTED if all(ok for _, ok in checks) else CONTRADICTED
    if grpo and not informative:
        verdict = INCONCLUSIVE
    reason = "; ".join(f"{name}: {'yes' if ok else 'no'}" for name, ok in checks)
    betas = sorted({r.config["beta"] for r in bnpo0})
    which = "with β = 0" if betas in ([], [0]) else f"(β = {', '.join(f'{b:g}' for b in betas)}; KL = 0 at step 1)"
    reason += f"; corollary (#2995) bnpo {which} has step-1 loss ≠ 0 in every run: {'yes' if bnpo_nonzero else 'no'}"
    if bnpo_live and not bnpo_nonzero:  # the corollary informs; the verdict is grpo's
        smallest = min(abs(r.metrics[0]["loss"]) for r in bnpo_live)
        reason += (f" (smallest |loss| {smallest:.1e}: at step 1 bnpo's loss is −Σ advantage × length / Σ length, "
                   f"0 where the completions of each group with unequal rewards are of one length)")
    if silent := [r for r in runs if not _signal_at_step1(r)]:
        reason += (f"; {len(silent)} run(s) left out of the gradient and bnpo checks: all-equal rewards in every "
                   f"group of the first batch (advantages 0, so loss and gradient 0)")
    if test.get("step1_only"):
        reason += f"; learning not checked ({max(r.config['max_steps'] for r in runs)}-step runs)"
    return Verdict(test["statement"], verdict, reason, "\n".join(lines))


TESTS = {"paired": check_paired, "differ": check_differ, "zero_loss_step1": check_zero_loss_step1,
         "placebo": check_placebo}


def verdicts(spec: SweepSpec, runs: list[Run]) -> list[Verdict]:
    return [TESTS[t["kind"]](spec, runs, t) for t in report_tests(spec)]
