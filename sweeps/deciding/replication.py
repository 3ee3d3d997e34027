"""Each test on two disjoint seed sets, and what each test could detect: the replication rule
(combine), each set's verdict beside the combined one (replication_table), and a test's facts for
the report's summary (the pairs per set, the smallest effect each set alone detects with 80%
power, the control arm's median). The verdicts themselves are sweeps/deciding/verdicts.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from . import power, statistics as st
from .runs import Run, _label
from ..report_spec import compared_metric, margin_of, report_tests
from grpo_core.record.run_metrics import CENSORED
from .verdicts import (
    CONTRADICTED,
    EQUIVALENCE_CONFIDENCE,
    EQUIVALENT,
    INCONCLUSIVE,
    INSIDE_MARGIN,
    NO_EFFECT,
    NOT_REPLICATED,
    SUPPORTED,
    TOO_FEW_SEEDS,
    Comparison,
    Verdict,
    fmt_interval,
    _fmt_num,
    _group,
    _phrase,
    _unit,
    verdicts,
)

STEP_METRICS = tuple(m for m in CENSORED if _unit(m) == "steps")  # what a margin in steps applies to

if TYPE_CHECKING:  # a type only: the sweep spec builds configs (torch); the verdicts read its data
    from ..spec import SweepSpec


# ---- replication: each test on two disjoint seed sets -----------------------------------------------
# A claim spec runs its grid on `seeds` (discovery) and `replication_seeds`; every test is computed on
# each set alone, exactly as above (Holm within the set), and the two are combined comparison by
# comparison: supported or contradicted only where both sets are significant in the same direction,
# not replicated where one set is significant and the other is not (or points the other way).
def seed_sets(spec: SweepSpec) -> list[tuple[str, list]]:
    """(name, seeds) of each set the report tests on."""
    if spec.replication_seeds:
        return [("discovery", list(spec.seeds)), ("replication", list(spec.replication_seeds))]
    return [("all seeds", list(spec.seeds))]


@dataclass
class SetResult:
    name: str  # discovery | replication | all seeds
    seeds: list
    verdict: Verdict


def replicated_verdicts(spec: SweepSpec, runs: list[Run]) -> list[tuple[Verdict, list[SetResult]]]:
    """Per test: the combined verdict and the verdict of each seed set."""
    per_set = [
        (name, seeds, verdicts(spec, [r for r in runs if r.point["seed"] in seeds])) for name, seeds in seed_sets(spec)
    ]
    out = []
    for i, test in enumerate(report_tests(spec)):
        found = [SetResult(name, seeds, vs[i]) for name, seeds, vs in per_set]
        margin = margin_of(spec, compared_metric(test), STEP_METRICS) if test["kind"] == "paired" else None
        v = combine(test, found, margin)
        v.sets = [(f.name, f.verdict.comparisons) for f in found]  # each set's effects, for the forest plot
        if test["kind"] in ("paired", "differ") and all(f.verdict.comparisons for f in found):
            v.facts = test_facts(spec, runs, test, found)
        out.append((v, found))
    return out


def test_facts(spec: SweepSpec, runs: list[Run], test: dict, found: list[SetResult]) -> dict:
    """What a test could see: the pairs (seeds) per set, the smallest effect each set alone detects
    with 80% power (sweeps/deciding/power.py, from these runs' own differences, Holm's first step over the
    test's comparisons; the largest over comparisons and sets), and the control arm's median and
    censored share (per stratum of the other axes). A test across several levels (differ): the
    effect is one level shifted from the others, and its first level stands as the control."""
    metric, m = compared_metric(test), max(len(f.verdict.comparisons) for f in found)
    by_label: dict[str, list[Comparison]] = {}
    for f in found:
        for c in f.verdict.comparisons:
            by_label.setdefault(c.label, []).append(c)
    levels, direction = test["kind"] == "differ", test.get("direction")

    def detectable_at(noise, n: int) -> float:
        return power.detectable_shift(noise, n, m) if levels else power.detectable_effect(noise, n, m, direction)

    def needed_for(noise, effect: float) -> Optional[int]:
        return power.blocks_needed(noise, effect, m) if levels else power.seeds_needed(noise, effect, m, direction)

    center = power.centered_blocks if levels else power.centered
    noises = [center([c.blocks if levels else c.diffs for c in cs]) for cs in by_label.values()]
    reference = spec.grid[test["axis"]][0] if levels else test["control"]
    # the largest over comparisons and sets; nan (no differences at all to resample) stays nan, where
    # max() would drop it and read "any effect"
    found_at = [detectable_at(noise, c.n_pairs) for noise, cs in zip(noises, by_label.values()) for c in cs]
    detectable = math.nan if any(math.isnan(d) for d in found_at) else max(found_at)
    control = [r for r in runs if r.point[test["axis"]] == reference]
    strata = []
    for key, group in _group(spec, control, exclude=(test["axis"],)).items():
        values = [r.value(metric) for r in group]
        strata.append((_label(key), st.median(values), sum(math.isinf(v) for v in values), len(values)))
    facts = {
        "metric": metric,
        "n_per_set": [min(c.n_pairs for c in f.verdict.comparisons) for f in found],
        "detectable": detectable,
        "control": strata,
    }
    if not levels:  # the tied model beside the shift: an effect that reaches only the pairs that differ here
        moved = power.moved_share([c.diffs for cs in by_label.values() for c in cs])
        if 0 < moved < 1:
            tied = [
                power.detectable_effect(noise, c.n_pairs, m, direction, moved=moved)
                for noise, cs in zip(noises, by_label.values())
                for c in cs
            ]
            facts.update(moved=moved, detectable_tied=math.nan if any(math.isnan(d) for d in tied) else max(tied))
    if levels:
        facts["levels_of"] = f"{test['axis']}={reference}"
    if _unit(metric) == "steps":  # the target in steps, and the pairs per set these differences need for it
        medians = [med for _, med, _, _ in strata if math.isfinite(med)]
        # (no control run finished yet, or one never learned: the target cannot be told)
        target = power.target_effect(max(medians) if medians and len(medians) == len(strata) else math.nan)
        needs = [needed_for(noise, target) for noise in noises if noise.size]
        if needs:  # without differences no seed count can be told
            facts.update(target=target, needed=None if None in needs else max(needs))
    if not levels:  # the verdict's own power at the effect that matters: the target in steps, or the margin
        effect = facts.get("target") if metric in STEP_METRICS else margin_of(spec, metric, STEP_METRICS)
        if effect is not None and all(len(c.diffs) for cs in by_label.values() for c in cs):
            facts.update(
                power_at=effect,
                verdict_power=min(
                    power.verdict_power([c.diffs for c in cs], effect, m, direction, whole_steps=metric in STEP_METRICS)
                    for cs in by_label.values()
                ),
            )
    return facts


def _is_inconclusive(v: Verdict) -> bool:
    return v.verdict.startswith(INCONCLUSIVE)


def combine(test: dict, found: list[SetResult], margin: Optional[float] = None) -> Verdict:
    """One verdict from the seed sets' verdicts of one test (see the comment above). A null on both
    sets becomes "equivalent within ±margin" when a margin was declared and, on each set alone,
    every comparison's 90% interval lies strictly inside it (equivalence, replicated like an effect);
    an effect significant on both sets whose intervals lie so inside the margin says so ("supported,
    but inside the margin ±m"): real on these seeds, smaller than what the margin declared to matter."""
    if len(found) == 1:  # one seed set: a significant result is not replicated yet
        v = found[0].verdict
        if v.verdict.startswith((NO_EFFECT, INCONCLUSIVE)):
            return v
        return Verdict(v.statement, f"{NOT_REPLICATED} (one seed set: {v.verdict})", v.reason, v.table, v.comparisons)
    d, r = (f.verdict for f in found)
    reason = "; ".join(
        f"{f.name} (seeds {_seed_list(f.seeds)}): {f.verdict.verdict}: {f.verdict.reason}" for f in found
    )
    if not d.comparisons and not r.comparisons:  # checks on every run (placebo, C1): both sets must agree
        verdict = (
            d.verdict
            if d.verdict == r.verdict
            else (NOT_REPLICATED if {d.verdict, r.verdict} & {SUPPORTED, CONTRADICTED} else INCONCLUSIVE)
        )
        return Verdict(d.statement, verdict, reason, "")
    outcomes: dict = {}
    for which, v in enumerate((d, r)):
        for c in v.comparisons:
            outcomes.setdefault(c.label, ["", ""])[which] = c.outcome
    sup = [label for label, (a, b) in outcomes.items() if a == b == SUPPORTED]
    con = [label for label, (a, b) in outcomes.items() if a == b == CONTRADICTED]
    nr = [label for label, (a, b) in outcomes.items() if (a or b) and a != b]
    if sup or con or nr:
        verdict = _phrase(len(outcomes), [(SUPPORTED, sup), (CONTRADICTED, con), (NOT_REPLICATED, nr)])
        if margin is not None and verdict in (SUPPORTED, CONTRADICTED):
            inside, covers, shown, m = _against_margin(test, found, margin)
            if inside and covers:  # real on both sets, and smaller than the margin declared as no practical effect
                verdict += f"{INSIDE_MARGIN} {m}"
                reason += (
                    f"; every 90% interval lies inside the declared margin {m} on both seed sets ({shown}): "
                    f"an effect these seeds show, smaller than the margin declared before the runs"
                )
    elif _is_inconclusive(d) or _is_inconclusive(r):
        verdict = TOO_FEW_SEEDS if TOO_FEW_SEEDS in (d.verdict, r.verdict) else INCONCLUSIVE
    else:
        verdict = NO_EFFECT
        if margin is not None:
            verdict, reason = _equivalence(test, found, margin, reason)
    return Verdict(d.statement, verdict, reason, replication_table(test, found, margin))


def margin_text(margin: float, metric: str) -> str:
    unit = _unit(metric)
    return f"±{margin:g} {unit}" if unit in ("steps", "completions") else f"±{margin:g}"


def _equivalence(test: dict, found: list[SetResult], margin: float, reason: str) -> tuple[str, str]:
    """(verdict, reason) of a null on two seed sets against the declared margin: equivalent when, on
    each set alone, every comparison's 90% interval lies strictly inside ±margin (two one-sided
    signed-rank tests at 0.05) and that interval covers the mean difference at its nominal rate when
    these differences are resampled (st.hodges_lehmann_coverage: mostly ties and an outlier fail it,
    so "within ±m" is never read from an interval that misses the mean)."""
    inside, covers, shown, m = _against_margin(test, found, margin)
    if inside and covers:
        return f"{EQUIVALENT} {m}", (
            f"{reason}; equivalence: every 90% interval (two one-sided tests at 0.05) lies "
            f"inside the declared margin {m} on both seed sets ({shown})"
        )
    why = (
        "do not all lie inside it on both seed sets"
        if not inside
        else f"lie inside it, but do not cover the mean difference at their nominal 90% when these differences are "
        f"resampled (below {EQUIVALENCE_CONFIDENCE - st.COVERAGE_SLACK:.0%}), so a larger mean is not ruled out"
    )
    return (
        NO_EFFECT,
        f"{reason}; not shown equivalent within the declared margin {m}: the 90% intervals ({shown}) {why}",
    )


def _against_margin(test: dict, found: list[SetResult], margin: float) -> tuple[bool, bool, str, str]:
    """Whether every comparison's 90% interval, on each seed set alone, lies strictly inside ±margin;
    whether each covers the mean difference at its nominal rate when the differences are resampled;
    those intervals as text; the margin as text."""
    metric = compared_metric(test)
    comparisons = [(f.name, c) for f in found for c in f.verdict.comparisons]
    inside = all(-margin < c.low90 and c.high90 < margin for _, c in comparisons)
    coverage = {(name, c.label): st.hodges_lehmann_coverage(c.diffs, EQUIVALENCE_CONFIDENCE) for name, c in comparisons}
    covers = all(cov >= EQUIVALENCE_CONFIDENCE - st.COVERAGE_SLACK for cov in coverage.values())
    shown = "; ".join(
        f"{name}: [{_fmt_num(c.low90, metric, -1)}, {_fmt_num(c.high90, metric, +1)}], covering the "
        f"mean in {coverage[(name, c.label)]:.0%} of resamples"
        for name, c in comparisons
    )
    return inside, covers, shown, margin_text(margin, metric)


def _seed_list(seeds: list) -> str:
    """[0, 1, 2, 3] → 0–3; otherwise the list."""
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def replication_table(test: dict, found: list[SetResult], margin: Optional[float] = None) -> str:
    """Each comparison on both seed sets: pairs, paired difference with its 95% interval, Holm p,
    outcome (and, with a declared margin, the 90% interval); and the replicated outcome."""
    metric = compared_metric(test) if test["kind"] in ("paired", "differ") else ""
    by_label: dict = {}
    for which, f in enumerate(found):
        for c in f.verdict.comparisons:
            by_label.setdefault(c.label, [None] * len(found))[which] = c
    effect = "paired difference" if test["kind"] == "paired" else "largest paired difference to the first level"
    per_set = ("pairs", f"{effect} [95% CI]", "Holm p", "outcome")
    if margin is not None:  # equivalence reads the 90% interval against the margin
        per_set += (f"90% CI (margin {margin_text(margin, metric)})",)
    head = ["comparison"] + [f"{f.name}: {h}" for f in found for h in per_set]
    lines = ["| " + " | ".join(head + ["replicated"]) + " |", "|" + "---|" * (len(head) + 1)]
    for label, cs in by_label.items():
        cells = [label]
        for c in cs:
            cells += (
                ["–"] * len(per_set)
                if c is None
                else [
                    str(c.n_pairs),
                    fmt_interval(c.estimate, c.low, c.high, metric),
                    f"{c.p_adj:.3g}",
                    c.outcome or "–",
                ]
                + (
                    [f"[{_fmt_num(c.low90, metric, -1)}, {_fmt_num(c.high90, metric, +1)}]"]
                    if margin is not None
                    else []
                )
            )
        outs = [c.outcome if c else "" for c in cs]
        both = outs[0] if outs[0] and all(o == outs[0] for o in outs) else (NOT_REPLICATED if any(outs) else "–")
        lines.append("| " + " | ".join(cells + [both]) + " |")
    return "\n".join(lines)
