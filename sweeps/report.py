"""The claims report: per claim a table over variants, statistical tests, a verdict derived from
them by code, and figures. Reads the trial run folders a sweep wrote (config.yaml, summary.json,
metrics.jsonl), so it needs neither Optuna nor MLflow."""

from __future__ import annotations

import json
import math
import statistics as pystats
from dataclasses import dataclass, field
from typing import Optional
from pathlib import Path

import yaml

from sweeps import statistics as st
from grpo_core.config.validation import SEED_RANGE, seed_in_range
from grpo_core.config.values import short_value
from grpo_core.util.errors import UserInputError
from grpo_core.run import read_metrics
from grpo_core.record.run_metrics import CENSORED, first_crossing_step, trailing_average

from .spec import SweepSpec

ALPHA = 0.05
QUICK_KEYS = ("max_steps", "seeds", "replication_seeds", "grid")  # a spec's `quick`: what --quick changes
TEST_KINDS = ("paired", "differ", "zero_loss_step1", "placebo")
FIGURE_KINDS = ("reward", "early_loss", "completion_length")


@dataclass
class Run:
    point: dict  # grid axis values and seed
    config: dict
    summary: dict
    metrics: list
    folder: Optional[Path] = None  # its run folder, where the report reads completions.jsonl

    def value(self, metric: str) -> float:
        """A run's value of `metric`: a summary key (censored ones: None -> inf) or
        `final:<per-step key>`, the mean over the last stl_window steps."""
        if metric.startswith("final:"):
            key = metric[len("final:"):]
            tail = [m[key] for m in self.metrics[-self.config["stl_window"]:] if m.get(key) is not None]
            return sum(tail) / len(tail) if tail else math.nan
        v = self.summary.get(metric)
        if v is None:
            return st.INF if metric in CENSORED else math.nan
        return float(v)


SUMMARY_METRICS = ("steps_to_learn", "loss_departure_step", "completions_to_learn", "learned", "final_reward",
                   "reward_auc", "baseline_reward", "completions_generated", "median_step_time_s", "train_time_s",
                   "wall_time_s")  # the summary.json keys a test can compare


def compared_metric(test: dict) -> str:
    """The metric a paired or differ test compares: its `metric`, steps_to_learn where it names none."""
    return test.get("metric", "steps_to_learn")


AUC = "reward_auc"  # the continuous metric beside steps_to_learn: mean training reward over the run
AUC_SUFFIX = " (reward AUC: mean training reward over the run)"


def report_tests(spec: SweepSpec) -> list[dict]:
    """The spec's tests, each one on steps_to_learn followed by its twin on reward AUC (the same
    axis, arms and seeds, the direction turned: learning sooner is a larger area under the reward
    curve), so effects finer than one step show. A twin carries `twin_of`, its original's index."""
    out = []
    for i, test in enumerate(spec.report.get("tests") or []):
        out.append(test)
        if test.get("kind") in ("paired", "differ") and compared_metric(test) == "steps_to_learn":
            twin = {k: v for k, v in test.items() if k not in ("claimed_effect", "claimed_effect_text", "note")}
            twin.update(metric=AUC, statement=test["statement"] + AUC_SUFFIX, twin_of=i)
            if test.get("direction"):
                twin["direction"] = {"lower": "higher", "higher": "lower"}[test["direction"]]
            out.append(twin)
    return out


def _check_quick(spec: SweepSpec) -> None:
    """A spec's `quick` section, whole, at every command that reads the spec (a typo or a value of
    the wrong shape surfaced only at `grpo reproduce --quick`, some as a traceback)."""
    quick = spec.quick or {}
    unknown = sorted(set(quick) - set(QUICK_KEYS))
    if unknown:
        raise UserInputError(f"{spec.path}: quick.{unknown[0]}: unknown key; allowed: {', '.join(QUICK_KEYS)}")
    steps = quick.get("max_steps", 1)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise UserInputError(f"{spec.path}: quick.max_steps: {short_value(steps)}; allowed: an integer ≥ 1")
    for key in ("seeds", "replication_seeds"):
        seeds = quick.get(key, [])
        if not isinstance(seeds, list) or not all(seed_in_range(s) for s in seeds):
            raise UserInputError(f"{spec.path}: quick.{key}: {short_value(seeds)}; allowed: a list of integer seeds "
                                 f"in {SEED_RANGE}")
    grid = quick.get("grid", {})
    if not isinstance(grid, dict):
        raise UserInputError(f"{spec.path}: quick.grid: {short_value(grid)}; allowed: a mapping of grid axes to "
                             f"sub-lists of their values, e.g. {{{next(iter(spec.grid), 'axis')}: [...]}}")
    for axis, values in grid.items():  # a part of the grid, never new values
        full = spec.grid.get(axis)
        if full is None:
            raise UserInputError(f"{spec.path}: quick.grid.{axis}: not a grid axis; allowed: {', '.join(spec.grid)}")
        if not isinstance(values, list) or not values or any(v not in full for v in values):
            raise UserInputError(f"{spec.path}: quick.grid.{axis}: {short_value(values)}; allowed: a non-empty "
                                 f"sub-list of grid.{axis} {full}")


def validate_report(spec: SweepSpec, claim: bool = True) -> None:
    """Check a claim spec's `report` section before anything runs. claim=False (`grpo sweep`): a
    sweep needs no report, but what its spec's report section holds is checked all the same, so a
    mistake in it shows before the sweep trains rather than at `grpo reproduce` after."""
    rep = spec.report
    where = f"{spec.path}: report"
    if claim and not spec.replication_seeds:
        raise UserInputError(f"{spec.path}: replication_seeds: missing; a claim spec needs a second seed set, "
                             f"disjoint from `seeds` (every verdict must hold on both)")
    if claim and not rep.get("tests"):
        raise UserInputError(f"{where}.tests: missing; a claim needs at least one test behind its verdict")
    tests = rep.get("tests") or []
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise UserInputError(f"{where}.tests: {short_value(tests)}; allowed: a list of tests, each a mapping "
                             f"with a `kind` ({', '.join(TEST_KINDS)})")
    figures = rep.get("figures", [])
    if not isinstance(figures, list):
        raise UserInputError(f"{where}.figures: {short_value(figures)}; allowed: a list of {', '.join(FIGURE_KINDS)}")
    for fig in figures:
        if not isinstance(fig, str) or fig not in FIGURE_KINDS:
            raise UserInputError(f"{where}.figures: unknown figure {fig!r}; allowed: {', '.join(FIGURE_KINDS)}")
    if not isinstance(spec.quick or {}, dict):
        raise UserInputError(f"{spec.path}: quick: {short_value(spec.quick)}; allowed: a mapping")
    _check_quick(spec)
    for i, test in enumerate(tests):
        kind = test.get("kind")
        if not isinstance(kind, str) or kind not in TEST_KINDS:
            raise UserInputError(f"{where}.tests[{i}].kind: {kind!r}; allowed: {', '.join(TEST_KINDS)}")
        if not isinstance(test.get("statement"), str) or not test["statement"].strip():
            raise UserInputError(f"{where}.tests[{i}].statement: {short_value(test.get('statement'))}; allowed: the "
                                 f"question the test answers, as text (the report's verdict row reads it)")
        if kind in ("zero_loss_step1", "placebo"):
            continue
        axis = test.get("axis")
        if not isinstance(axis, str) or axis not in spec.grid:
            raise UserInputError(f"{where}.tests[{i}].axis: {axis!r} is not a grid axis ({', '.join(spec.grid)})")
        metric = compared_metric(test)
        if not (isinstance(metric, str) and (metric in SUMMARY_METRICS
                                             or (metric.startswith("final:") and len(metric) > len("final:")))):
            raise UserInputError(f"{where}.tests[{i}].metric: {metric!r}; allowed: {', '.join(SUMMARY_METRICS)}, or "
                                 f"final:<a per-step key of metrics.jsonl>")
        if kind == "paired":
            values = spec.grid[axis]
            treatment = test.get("treatment", [])
            if not isinstance(treatment, list) or not treatment:
                raise UserInputError(f"{where}.tests[{i}].treatment: {short_value(treatment)}; allowed: a non-empty list "
                                     f"of values of grid axis {axis} {values}")
            for v in [*treatment, test.get("control")]:
                if v not in values:
                    raise UserInputError(f"{where}.tests[{i}]: {v!r} is not a value of grid axis {axis} {values}")
            if test.get("direction") not in ("lower", "higher"):
                raise UserInputError(f"{where}.tests[{i}].direction: allowed: lower, higher")
            if test.get("note") is not None and test["note"] not in NOTES:
                raise UserInputError(f"{where}.tests[{i}].note: {test['note']!r}; allowed: {', '.join(NOTES)}")
            if "claimed_effect" in test and not isinstance(test["claimed_effect"], (int, float)):
                raise UserInputError(f"{where}.tests[{i}].claimed_effect: allowed: a number (the paired "
                                     f"difference treatment − control the source claims)")


def _summary_fault(summary: dict) -> Optional[str]:
    """What makes a finished run's summary.json unusable for a report: a value a test reads that is
    not a number (or null), or a step count that is not an integer."""
    steps = summary.get("steps_completed")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)):
        return f"steps_completed is {short_value(steps)}, not an integer"
    for key in SUMMARY_METRICS:
        value = summary.get(key)
        if value is not None and not isinstance(value, (int, float)):
            return f"{key} is {short_value(value)}, not a number"
    return None


def collect_runs(runs_root: Path, spec: SweepSpec) -> tuple[list[Run], list[str]]:
    """Finished runs of a sweep, and the trial folders left out, each named with why: not finished
    (killed, failed, still running), damaged (a file missing, cut or unreadable), not this spec's
    (a point outside its grid, or a config that differs from its base), or a second finished run
    of one point (the later folder is kept, as a resumed sweep does)."""
    from grpo_core.config.values import coerce_value

    from .adopt import IGNORED, config_difference
    from .spec import point_key

    wanted = {point_key(p) for p in spec.grid_points()}
    try:
        declared = {k: coerce_value(k, v) for k, v in spec.base.items() if k not in IGNORED}
    except ValueError:  # a ConfigError is one: a base not loaded through load_spec's checks
        declared = dict(spec.base)

    def difference(point: dict, config: dict) -> Optional[tuple]:
        """Where the folder's config is not the spec's at its point: the spec's own base keys, then
        every other key the folder records, as `grpo sweep` compares folders it adopts (skipped where
        the point's config cannot be built here: a model or data file this machine does not have,
        for a report rebuilt from committed run folders)."""
        key = next((k for k, v in declared.items() if config.get(k) != v), None)
        if key is not None:
            return key, config.get(key), declared[key]
        try:
            return config_difference(spec, point, config, absent_ok=True)
        except UserInputError:
            return None
    runs, left_out = [], []
    for folder in sorted((runs_root / spec.name).glob("trial-*")):
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except FileNotFoundError:
            left_out.append(f"{folder.name} (not finished: no summary.json)")
            continue
        except (OSError, ValueError) as exc:
            left_out.append(f"{folder.name} (damaged: summary.json {_why(exc)})")
            continue
        if not isinstance(summary, dict):
            left_out.append(f"{folder.name} (damaged: summary.json not a mapping)")
            continue
        if summary.get("status") != "finished":
            left_out.append(f"{folder.name} ({summary.get('status') or 'not finished'})")
            continue
        if (fault := _summary_fault(summary)):
            left_out.append(f"{folder.name} (damaged: summary.json {fault})")
            continue
        try:
            config = yaml.safe_load((folder / "config.yaml").read_text())
            point = {axis: config[axis] for axis in spec.grid}
            point["seed"] = config["seed"]
        except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError) as exc:
            left_out.append(f"{folder.name} (damaged: config.yaml {_why(exc)})")
            continue
        try:
            metrics = read_metrics(folder / "metrics.jsonl")
        except (OSError, ValueError) as exc:
            left_out.append(f"{folder.name} (damaged: metrics.jsonl {_why(exc)})")
            continue
        if len(metrics) != summary.get("steps_completed", len(metrics)):
            left_out.append(f"{folder.name} (damaged: metrics.jsonl has {len(metrics)} step(s), summary.json's "
                            f"steps_completed {summary.get('steps_completed')})")
            continue
        if point_key(point) not in wanted:
            left_out.append(f"{folder.name} (not a point of this spec's grid: {_label(point.items())})")
            continue
        if (differ := difference(point, config)) is not None:
            key, have, want = differ
            left_out.append(f"{folder.name} (another config: {key} {short_value(have)}, the spec's {short_value(want)})")
            continue
        runs.append(Run(point, config, summary, metrics, folder))
    # a grid point can have a failed trial and, after a rerun, a finished one (left out above as not
    # finished); two finished folders of one point: the later is kept, the earlier named
    unique: dict[tuple, Run] = {}
    for r in runs:
        key = point_key(r.point)
        if key in unique:
            left_out.append(f"{unique[key].folder.name} (a second finished run of its point: {r.folder.name} is used)")
        unique[key] = r
    return list(unique.values()), left_out


def _why(exc: BaseException) -> str:
    """A damaged file's fault in a few words."""
    if isinstance(exc, FileNotFoundError):
        return "missing"
    if isinstance(exc, (json.JSONDecodeError, yaml.YAMLError)):
        return "cut or not valid"
    if isinstance(exc, (KeyError, TypeError)):
        return f"lacks {exc.args[0]!r}" if isinstance(exc, KeyError) else "not a mapping"
    return f"unreadable ({type(exc).__name__})"


def _variant_key(spec: SweepSpec, run: Run, exclude: tuple = ()) -> tuple:
    return tuple((a, run.point[a]) for a in spec.grid if a not in exclude)


def _label(pairs) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in pairs)


def _fmt_steps(v: float, max_steps: int) -> str:
    if math.isnan(v):
        return "–"
    return "not learned" if math.isinf(v) else f"{v:g}"


def _group(spec: SweepSpec, runs: list[Run], exclude: tuple = ()) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault(_variant_key(spec, r, exclude), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: [str(v) for _, v in kv[0]]))


# ---- tables -------------------------------------------------------------------------------------
def variant_table(spec: SweepSpec, runs: list[Run]) -> str:
    max_steps = runs[0].config["max_steps"] if runs else 0
    show_length = "completion_length" in spec.report.get("figures", [])
    window = runs[0].config["stl_window"] if runs else 0
    head = ["variant", "n", "learned", f"median steps_to_learn [95% CI] (floor {window})", "median loss_departure_step",
            "baseline (± SE)", "final reward (mean ± sd)"]
    if show_length:
        head.append("final completion length")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, group in _group(spec, runs).items():
        stl = [r.value("steps_to_learn") for r in group]
        lo, hi = st.bootstrap_median_ci(stl)
        dep = [r.value("loss_departure_step") for r in group]
        final = [r.value("final_reward") for r in group]
        sd = pystats.stdev(final) if len(final) > 1 else 0.0
        row = [_label(key), str(len(group)), f"{sum(not math.isinf(v) for v in stl)}/{len(group)}",
               f"{_fmt_steps(st.median(stl), max_steps)} [{_fmt_steps(lo, max_steps)}, {_fmt_steps(hi, max_steps)}]",
               _fmt_steps(st.median(dep), max_steps).replace("not learned", "never"),
               f"{pystats.mean(r.summary['baseline_reward'] for r in group):.3f} "
               f"(± {max(r.summary.get('baseline_reward_se', math.nan) for r in group):.3f})",
               f"{pystats.mean(final):.3f} ± {sd:.3f}"]
        if show_length:
            row.append(f"{pystats.mean(r.value('final:completions/mean_length') for r in group):.2f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# ---- tests and verdicts -----------------------------------------------------------------------
# Four verdict words, computed below: supported (significant in the claimed direction),
# contradicted (significant in the opposite direction), no effect detected (not significant; the
# reason states the largest effect the 95% intervals still allow), inconclusive (these sample
# sizes cannot reach significance, or no run learned to compare). Strata where the outcome
# differs are named ("supported only under …").
SUPPORTED, CONTRADICTED, NO_EFFECT, INCONCLUSIVE = "supported", "contradicted", "no effect detected", "inconclusive"
TOO_FEW_SEEDS = f"{INCONCLUSIVE} (too few seeds)"
NOT_REPLICATED = "not replicated"  # significant on one seed set, not (or the other way) on the other


@dataclass
class Verdict:
    statement: str
    verdict: str
    reason: str
    table: str
    comparisons: list = field(default_factory=list)  # paired / differ tests: one per stratum and treatment
    facts: dict = field(default_factory=dict)  # paired tests on both sets: n per set, detectable effect, control


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
    diffs: list = field(default_factory=list)  # the paired differences tested (censored ones capped)


def _by_seed(group: list[Run], axis: str, levels: list, metric: str) -> tuple[list, list[list[float]]]:
    """The seeds that ran every one of `levels` of `axis`, and per seed the values of `metric` at
    each level (rows: seeds; columns: levels): the blocks every paired test is computed on."""
    table = {}
    for r in group:
        table.setdefault(r.point["seed"], {})[repr(r.point[axis])] = r.value(metric)
    seeds = sorted(s for s, v in table.items() if all(repr(lv) in v for lv in levels))
    return seeds, [[table[s][repr(lv)] for lv in levels] for s in seeds]


def _paired(spec: SweepSpec, group: list[Run], axis: str, level, control, metric: str) -> tuple[list, list]:
    """Values of `metric` for the seeds run at both levels: (treated, control), seed order."""
    _, blocks = _by_seed(group, axis, [level, control], metric)
    blocks = [b for b in blocks if not any(math.isnan(v) for v in b)]  # a run without the metric: no pair
    return [b[0] for b in blocks], [b[1] for b in blocks]


def _horizon(runs: list[Run], metric: str) -> float:
    """Where a censored metric is capped: max_steps for the step metrics; for completions_to_learn
    (claim C6: dynamic sampling generates more per step) the fewest completions any of these runs
    generated, the count every one of them was observed for."""
    if metric == "completions_to_learn":
        return min((r.summary.get("completions_generated", math.inf) for r in runs), default=0)
    return runs[0].config["max_steps"] if runs else 0


def _unit(metric: str) -> str:
    if metric == "completions_to_learn":
        return "completions"
    return "steps" if metric in CENSORED else metric


def _compare(label: str, treated: list[float], control: list[float], metric: str, horizon: float) -> Comparison:
    """Paired comparison on seeds; censored metrics are capped at the horizon (st.capped)."""
    informative = True
    if metric in CENSORED:
        informative = any(not math.isinf(v) for v in [*treated, *control])
        treated, control = st.capped(treated, horizon), st.capped(control, horizon)
    d = [t - c for t, c in zip(treated, control)]
    est, lo, hi = st.hodges_lehmann(d)
    return Comparison(label, len(d), est, lo, hi, st.signed_rank_test(d), st.smallest_signed_rank_p(len(d)),
                      informative, diffs=d)


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


def _fmt_num(v: float, metric: str) -> str:
    if math.isinf(v):
        return "unbounded" if v > 0 else "−unbounded"
    digits = 0 if metric in CENSORED else 3
    return f"{round(v, digits) + 0.0:+.{digits}f}"  # + 0.0: a value that rounds to −0 prints as +0


def _allowed(comparisons: list[Comparison], direction: Optional[str], metric: str) -> str:
    """The largest effect the 95% intervals still allow, in the claimed direction (or either), and
    which comparison allows it when there are several."""
    def amount(v: float) -> str:
        if metric not in CENSORED:
            return f"{v:.3g}"
        unit = _unit(metric)
        return f"{v:.3g} {unit[:-1] if f'{v:.3g}' == '1' else unit}"

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
        counts += "; " + _allowed(informative, direction, metric)
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


def _fmt_value(v: float, metric: str, max_steps: int) -> str:
    if metric in CENSORED:
        return "not learned" if math.isinf(v) else _fmt_steps(v, max_steps)
    return f"{v:.3f}"


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


def check_paired(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """Each treatment against the control on the seeds both ran, in every stratum of the other
    axes: two-sided Wilcoxon signed-rank test, Hodges-Lehmann paired difference with its exact
    95% interval, Holm across the test's comparisons."""
    axis, metric, direction = test["axis"], compared_metric(test), test.get("direction")
    max_steps = runs[0].config["max_steps"] if runs else 0
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
            f"{'the fewest generated' if metric == 'completions_to_learn' else 'max_steps'}" if metric in CENSORED
            else metric)
    head = (f"| comparison | pairs | median {metric} | control ({axis}={test['control']}) | paired difference "
            f"[95% CI] ({unit}) | p | Holm p | outcome |" + (" claimed magnitude |" if extra else ""))
    lines = [head, "|" + "---|" * (9 if extra else 8)]
    for c, (mt, mc), cell in zip(comparisons, medians, claimed_cells):
        lines.append(f"| {c.label} | {c.n_pairs} | {_fmt_value(mt, metric, max_steps)} | {_fmt_value(mc, metric, max_steps)} | "
                     f"{_fmt_num(c.estimate, metric)} [{_fmt_num(c.low, metric)}, {_fmt_num(c.high, metric)}] | "
                     f"{c.p:.3g} | {c.p_adj:.3g} | {c.outcome or '–'} |" + (f" {cell} |" if extra else ""))
    return _verdict(test["statement"], comparisons, direction, metric, "\n".join(lines), extra + note)


def check_differ(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """The levels of `axis` on the seeds that ran them all, in every stratum: Friedman's test
    (seeds as blocks; two levels: signed-rank), Holm across strata; each level's paired
    difference to the first level with its 95% interval."""
    axis, metric = test["axis"], compared_metric(test)
    levels = spec.grid[axis]
    max_steps = runs[0].config["max_steps"] if runs else 0
    comparisons, rows = [], []
    for stratum, group in _group(spec, runs, exclude=(axis,)).items():
        seeds, blocks = _by_seed(group, axis, levels, metric)
        informative = metric not in CENSORED or any(not math.isinf(v) for b in blocks for v in b)
        if metric in CENSORED:
            blocks = [st.capped(b, _horizon(group, metric)) for b in blocks]
        p = st.friedman_test(blocks)
        best = st.friedman_test([list(range(len(levels)))] * len(seeds)) if len(seeds) >= 2 else 1.0
        effects = []
        for k in range(1, len(levels)):
            est, lo, hi = st.hodges_lehmann([b[k] - b[0] for b in blocks])
            effects.append((levels[k], est, lo, hi))
        widest = max(effects, key=lambda e: max(-e[2], e[3]))
        label = _label(stratum) or "all runs"
        comparisons.append(Comparison(label, len(seeds), widest[1], widest[2], widest[3],
                                      1.0 if math.isnan(p) else p, best, informative))
        rows.append((stratum, seeds, blocks, effects))
    _holm_outcomes(comparisons, None)
    ref = levels[0]
    lines = [f"| stratum | seeds | medians of {metric} by {axis} | paired difference to {axis}={ref} [95% CI] | "
             f"Friedman p | Holm p | outcome |", "|---|---|---|---|---|---|---|"]
    for c, (stratum, seeds, blocks, effects) in zip(comparisons, rows):
        meds = ", ".join(f"{lv}: {_fmt_value(st.median([b[k] for b in blocks]) if blocks else math.nan, metric, max_steps)}"
                         for k, lv in enumerate(levels))
        diffs = "; ".join(f"{lv}: {_fmt_num(e, metric)} [{_fmt_num(lo, metric)}, {_fmt_num(hi, metric)}]"
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


def rests_on_steps_to_learn(test: dict) -> bool:
    """Whether a test's verdict reads steps_to_learn, the metric the placebo calibrates."""
    if test["kind"] in ("paired", "differ"):
        return compared_metric(test) == "steps_to_learn"
    return test["kind"] == "zero_loss_step1" and not test.get("step1_only")


def withheld(v: Verdict, untrusted: str) -> Verdict:
    """A verdict that rests on steps_to_learn where the placebo did not pass: inconclusive, with
    what the runs alone read kept in its reason (the tables below it are unchanged)."""
    return Verdict(v.statement, f"{INCONCLUSIVE} (placebo not passed)",
                   f"steps_to_learn is not trusted here: {untrusted}; the runs alone read {v.verdict}: {v.reason}",
                   v.table, v.comparisons, v.facts)


# What makes a placebo's false-positive check apply to a claim's runs: the reward's noise (model,
# data, reward functions, completion length, batch, temperature) and steps_to_learn's own settings;
# the placebo must also have run at least as many steps (more steps, more chances to cross by noise)
SETUP_KEYS = ("model", "task", "dataset", "reward_funcs", "max_completion_length", "prompts_per_step",
              "num_generations", "temperature", "stl_window", "stl_delta")


def setup_of(config: dict) -> tuple:
    return tuple((k, str(config.get(k))) for k in SETUP_KEYS)


@dataclass
class PlaceboRecord:
    name: str  # the placebo spec's file stem
    horizons: dict  # set-up → the most steps its finished runs ran
    passed: bool
    verdict: str


def placebo_record(name: str, runs: list[Run], results: list[Verdict]) -> PlaceboRecord:
    horizons: dict = {}
    for r in runs:
        key = setup_of(r.config)
        horizons[key] = max(horizons.get(key, 0), r.config["max_steps"])
    passed = bool(results) and all(v.verdict == SUPPORTED for v in results)
    return PlaceboRecord(name, horizons, passed, results[0].verdict if results else "no finished runs")


def placebo_gate(placebos: list[PlaceboRecord], runs: list[Run]) -> Optional[str]:
    """Why a claim's steps_to_learn is not trusted (None: it is): each set-up its runs use must be
    covered by a placebo with finished runs of that set-up over at least as many steps, and every
    such placebo must have passed. A placebo spec none of whose runs finished covers nothing."""
    needed: dict = {}
    for r in runs:
        key = setup_of(r.config)
        needed[key] = max(needed.get(key, 0), r.config["max_steps"])
    for key, steps in needed.items():
        covering = [p for p in placebos if p.horizons.get(key, -1) >= steps]
        if not covering:
            what = ", ".join(f"{k} {v}" for k, v in key if v not in ("None", "[]"))
            return f"no placebo has finished runs of this set-up ({what}) over {steps} steps or more"
        failed = [p for p in covering if not p.passed]
        if failed:
            return f"the placebo ({failed[0].name}) reads {failed[0].verdict}"
    return None


POSITIVE_CONTROL = "positive_control"  # a spec's `claim` for the testbed's positive control
NO_POSITIVE_CONTROL = "this testbed has no positive control"


def unproven(v: Verdict, insensitive: str) -> Verdict:
    """A "no effect detected" on a testbed whose positive control did not read supported: the
    testbed has not shown it can detect an effect known to exist, so the null result says nothing
    yet. Inconclusive, with what the runs alone read kept in its reason."""
    if v.verdict != NO_EFFECT:
        return v
    why = "no positive control" if insensitive.startswith(NO_POSITIVE_CONTROL) else "positive control not passed"
    return Verdict(v.statement, f"{INCONCLUSIVE} ({why})",
                   f"a null result is not trusted here: {insensitive}; the runs alone read {v.verdict}: {v.reason}",
                   v.table, v.comparisons, v.facts)


def detectable_text(facts: dict) -> str:
    """Verdict.facts' detectable effect in words: in steps for the step metrics, where an effect
    below one step reads "< 1 step" (the pairs did not differ at all: any whole step shows)."""
    det, metric = facts["detectable"], facts["metric"]
    if math.isinf(det):
        return "none"
    if math.isnan(det):
        return "–"
    if det == 0:
        return "any (every pair differed alike)"
    if metric in CENSORED:
        unit = _unit(metric)
        return f"< 1 {unit[:-1]}" if det < 1 and unit == "steps" else f"{det:.3g} {unit}"
    return f"{det:.3g}"


def facts_text(v: Verdict) -> str:
    """One line on what a paired test could detect, from Verdict.facts ('' without facts)."""
    f = v.facts
    if not f:
        return ""
    det_text = detectable_text(f)
    if math.isinf(f["detectable"]):
        det_text += " (too few pairs for p < α/m)"
    control = "; ".join(f"{(label + ': ') if label else ''}median "
                        + ("not learned" if math.isinf(med) else f"{med:g}" if f["metric"] in CENSORED else f"{med:.3f}")
                        + (f", {cens} of {n} never learned" if f["metric"] in CENSORED else "")
                        for label, med, cens, n in f["control"])
    return (f"n per set {' and '.join(map(str, f['n_per_set']))}; smallest effect each set alone detects with 80% "
            f"power: {det_text} (simulated with this test, from these runs' paired differences); control arm: "
            f"{control}")


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
    per_set = [(name, seeds, verdicts(spec, [r for r in runs if r.point["seed"] in seeds]))
               for name, seeds in seed_sets(spec)]
    out = []
    for i, test in enumerate(report_tests(spec)):
        found = [SetResult(name, seeds, vs[i]) for name, seeds, vs in per_set]
        v = combine(test, found)
        if test["kind"] == "paired" and all(f.verdict.comparisons for f in found):
            v.facts = test_facts(spec, runs, test, found)
        out.append((v, found))
    return out


def test_facts(spec: SweepSpec, runs: list[Run], test: dict, found: list[SetResult]) -> dict:
    """What a paired test could see: the pairs per set, the smallest effect each set alone detects
    with 80% power (sweeps/power.py, from these runs' own paired differences, Holm's first step over
    the test's comparisons; the largest over comparisons and sets), and the control arm's median and
    censored share (per stratum of the other axes)."""
    from . import power

    metric, m = compared_metric(test), max(len(f.verdict.comparisons) for f in found)
    by_label: dict[str, list[Comparison]] = {}
    for f in found:
        for c in f.verdict.comparisons:
            by_label.setdefault(c.label, []).append(c)
    detectable = 0.0
    for cs in by_label.values():
        noise = power.centered([c.diffs for c in cs])
        for c in cs:
            detectable = max(detectable, power.detectable_effect(noise, c.n_pairs, m, test.get("direction")))
    control = [r for r in runs if r.point[test["axis"]] == test["control"]]
    strata = []
    for key, group in _group(spec, control, exclude=(test["axis"],)).items():
        values = [r.value(metric) for r in group]
        strata.append((_label(key), st.median(values), sum(math.isinf(v) for v in values), len(values)))
    return {"metric": metric, "n_per_set": [min(c.n_pairs for c in f.verdict.comparisons) for f in found],
            "detectable": detectable, "control": strata}


def _is_inconclusive(v: Verdict) -> bool:
    return v.verdict.startswith(INCONCLUSIVE)


def combine(test: dict, found: list[SetResult]) -> Verdict:
    """One verdict from the seed sets' verdicts of one test (see the comment above)."""
    if len(found) == 1:  # one seed set: a significant result is not replicated yet
        v = found[0].verdict
        if v.verdict.startswith((NO_EFFECT, INCONCLUSIVE)):
            return v
        return Verdict(v.statement, f"{NOT_REPLICATED} (one seed set: {v.verdict})", v.reason, v.table, v.comparisons)
    d, r = (f.verdict for f in found)
    reason = "; ".join(f"{f.name} (seeds {_seed_list(f.seeds)}): {f.verdict.verdict}: {f.verdict.reason}" for f in found)
    if not d.comparisons and not r.comparisons:  # checks on every run (placebo, C1): both sets must agree
        verdict = d.verdict if d.verdict == r.verdict else (
            NOT_REPLICATED if {d.verdict, r.verdict} & {SUPPORTED, CONTRADICTED} else INCONCLUSIVE)
        return Verdict(d.statement, verdict, reason, "")
    outcomes = {}
    for which, v in enumerate((d, r)):
        for c in v.comparisons:
            outcomes.setdefault(c.label, ["", ""])[which] = c.outcome
    sup = [label for label, (a, b) in outcomes.items() if a == b == SUPPORTED]
    con = [label for label, (a, b) in outcomes.items() if a == b == CONTRADICTED]
    nr = [label for label, (a, b) in outcomes.items() if (a or b) and a != b]
    if sup or con or nr:
        verdict = _phrase(len(outcomes), [(SUPPORTED, sup), (CONTRADICTED, con), (NOT_REPLICATED, nr)])
    elif _is_inconclusive(d) or _is_inconclusive(r):
        verdict = TOO_FEW_SEEDS if TOO_FEW_SEEDS in (d.verdict, r.verdict) else INCONCLUSIVE
    else:
        verdict = NO_EFFECT
    return Verdict(d.statement, verdict, reason, replication_table(test, found))


def _seed_list(seeds: list) -> str:
    """[0, 1, 2, 3] → 0–3; otherwise the list."""
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def replication_table(test: dict, found: list[SetResult]) -> str:
    """Each comparison on both seed sets: pairs, paired difference with its 95% interval, Holm p,
    outcome; and the replicated outcome."""
    metric = compared_metric(test) if test["kind"] in ("paired", "differ") else ""
    by_label = {}
    for which, f in enumerate(found):
        for c in f.verdict.comparisons:
            by_label.setdefault(c.label, [None] * len(found))[which] = c
    effect = "paired difference" if test["kind"] == "paired" else "largest paired difference to the first level"
    head = ["comparison"] + [f"{f.name}: {h}" for f in found for h in ("pairs", f"{effect} [95% CI]", "Holm p", "outcome")]
    lines = ["| " + " | ".join(head + ["replicated"]) + " |", "|" + "---|" * (len(head) + 1)]
    for label, cs in by_label.items():
        cells = [label]
        for c in cs:
            cells += (["–"] * 4 if c is None else
                      [str(c.n_pairs), f"{_fmt_num(c.estimate, metric)} [{_fmt_num(c.low, metric)}, {_fmt_num(c.high, metric)}]",
                       f"{c.p_adj:.3g}", c.outcome or "–"])
        outs = [c.outcome if c else "" for c in cs]
        both = outs[0] if outs[0] and all(o == outs[0] for o in outs) else (NOT_REPLICATED if any(outs) else "–")
        lines.append("| " + " | ".join(cells + [both]) + " |")
    return "\n".join(lines)


# ---- figures --------------------------------------------------------------------------------------
def figures(spec: SweepSpec, runs: list[Run], fig_dir: Path, prefix: str) -> list[Path]:
    if not spec.report.get("figures"):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir.mkdir(parents=True, exist_ok=True)
    tasks = spec.grid.get("task", [runs[0].config["task"]] if runs else [])
    paths = []
    panels = {"reward": [("reward", "training reward (moving average, 10 steps)", None, 10)],
              "early_loss": [("loss", "loss, first 30 steps", 30, 1), ("grad_norm", "grad_norm, first 30 steps", 30, 1)],
              "completion_length": [("completions/mean_length", "completion length (moving average, 10 steps)", None, 10)]}
    for kind in spec.report.get("figures", []):
        for task in tasks:
            task_runs = [r for r in runs if r.config["task"] == task]
            if not task_runs:
                continue
            cols = panels[kind]
            # the runs' data file when they train on one (a real model's task), else the built-in task
            name = Path(task_runs[0].config["dataset"]).stem if task_runs[0].config.get("dataset") else task
            window = min(10, min(int(r.config.get("stl_window", 10)) for r in task_runs))  # short runs: their window
            cols = [(key, title.replace("10 steps", f"{window} steps"), limit, window if smooth == 10 else smooth)
                    for key, title, limit, smooth in cols]
            fig, axes = plt.subplots(1, len(cols), figsize=(6.5 * len(cols), 4), dpi=100, squeeze=False)
            for ax, (key, title, limit, smooth) in zip(axes[0], cols):
                for vkey, group in _group(spec, task_runs, exclude=("task",)).items():
                    curves = [trailing_average([m[key] for m in r.metrics][:limit], smooth) for r in group]
                    mean, lo, hi = st.mean_band(curves)
                    steps = list(range(1, len(mean) + 1))
                    line, = ax.plot(steps, mean, lw=1.5, label=_label(vkey))
                    ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15)
                if kind == "reward":
                    base = pystats.mean(r.summary["baseline_reward"] for r in task_runs)
                    ax.axhline(base, color="grey", ls="--", lw=1, label="baseline")
                ax.set_title(f"{spec.text.get('claim', spec.name)} · {name} · {title}", fontsize=9)
                ax.set_xlabel("step")
                ax.legend(fontsize=7, loc="best")
            fig.tight_layout()
            path = fig_dir / f"{prefix}-{kind}-{name}.png"
            fig.savefig(path)
            plt.close(fig)
            paths.append(path)
    return paths


def bases_table(runs: list[Run]) -> list[str]:
    """The base model of each task (SHA-256 of its weights, as every run recorded it) and the
    baseline reward each sampling setting measured on it."""
    rows = {}
    for r in runs:
        key = (r.config["task"] if not r.config.get("dataset") else r.config["dataset"], r.config["model"],
               r.summary.get("base_model_sha256", "") or "not recorded", r.config["num_generations"],
               r.config["max_completion_length"], r.config["temperature"])
        rows.setdefault(key, set()).add((round(r.summary["baseline_reward"], 6),
                                         round(r.summary.get("baseline_reward_se", math.nan), 6),
                                         r.summary.get("baseline_prompts_used")))
    lines = ["| task | model | weights SHA-256 | G | max_completion_length | temperature | baseline reward ± SE "
             "(prompts) |", "|---|---|---|---|---|---|---|"]
    for (task, model, sha, g, mcl, temp), values in sorted(rows.items(), key=lambda kv: [str(x) for x in kv[0]]):
        shown = "; ".join(f"{b:.3f} ± {se:.4f} ({n})" for b, se, n in sorted(values))
        lines.append(f"| {task} | {model} | `{sha[:16]}` | {g} | {mcl} | {temp:g} | {shown} |")
    return ["Base models (each run records the SHA-256 of the weights it loaded; the tiny bases are committed "
            "under `grpo_core/tiny_bases/`, so every machine trains from the same bytes):", "", *lines]


# ---- the report -----------------------------------------------------------------------------------
def _left_out_text(spec: SweepSpec, runs: list[Run], left_out: list[str]) -> str:
    """What the section's runs lack: folders left out (named, with why) and grid points with no finished run."""
    done = {tuple(sorted(r.point.items())) for r in runs}
    missing = [p for p in spec.grid_points() if tuple(sorted(p.items())) not in done]
    text = ""
    if left_out:
        text += f", {len(left_out)} folder(s) left out: " + "; ".join(left_out[:6]) + ("; …" if len(left_out) > 6 else "")
    if missing:
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in missing[:4])
        text += (f"; **{len(missing)} of {len(spec.grid_points())} grid points have no finished run** ({shown}"
                 + ("; …" if len(missing) > 4 else "") + "): the tests use the seeds that have both arms")
    return text


def claim_section(spec: SweepSpec, runs: list[Run], unfinished: list[str], fig_dir: Path, report_dir: Path,
                  command: str, untrusted: Optional[str] = None,
                  insensitive: Optional[str] = None) -> tuple[str, list[Verdict]]:
    """The section of one claim spec and its verdicts. `untrusted`: why the placebo that calibrates
    steps_to_learn for these runs did not pass; the verdicts that rest on it are then withheld.
    `insensitive`: why the testbed's positive control did not pass; its "no effect detected" verdicts
    are then withheld (unproven)."""
    claim = spec.text.get("claim", spec.name)
    out = [f"## {claim} — {spec.path and Path(spec.path).stem}", ""]
    for key in ("source", "hypothesis", "expected", "notes"):
        if key in spec.text:
            out.append(f"- **{key.capitalize()}:** {spec.text[key]}")
    max_steps = runs[0].config["max_steps"] if runs else spec.base.get("max_steps")
    grid = "; ".join(f"{k} ∈ {v}" for k, v in spec.grid.items())
    sets = "; ".join(f"{name} seeds {_seed_list(seeds)}" for name, seeds in seed_sets(spec))
    out += [f"- **Settings:** {grid}; {sets}; max_steps {max_steps}; base {json.dumps(spec.base)}",
            f"- **Runs:** {len(runs)} finished" + _left_out_text(spec, runs, unfinished)
            + (f"; **{imprecise} run(s) had a baseline standard error above δ/4** (baseline_prompts too small)"
               if (imprecise := sum(r.summary.get("baseline_reward_se", 0) > r.config["stl_delta"] / 4 for r in runs))
               else ""),
            f"- **Command:** `{command}` (sweep `{spec.name}`, MLflow experiment `{spec.experiment}`)", ""]
    if not runs:
        out += ["No finished runs: no verdict.", ""]
        return "\n".join(out), []
    tested = replicated_verdicts(spec, runs)
    tests = report_tests(spec)
    if untrusted:
        tested = [(withheld(v, untrusted) if rests_on_steps_to_learn(test) else v, found)
                  for (v, found), test in zip(tested, tests)]
    if insensitive:
        tested = [(unproven(v, insensitive), found) for v, found in tested]
    results = [v for v, _ in tested]
    for v, test in zip(results, tests):
        out.append(f"**Verdict: {v.verdict}** — {v.statement}. ({v.reason}.)")
        if (facts := facts_text(v)):
            out.append(f"*What it could detect:* {facts}.")
        out.append("")
    for statement in spec.report.get("needs_full_run", []):  # --quick: tests these runs cannot decide
        out += [f"**Not decided here: needs the full run** (`grpo reproduce`) — {statement}.", ""]
    out += [variant_table(spec, runs), ""]
    for v, found in tested:
        out += [f"Test behind “{v.statement}”:", ""]
        if v.table and len(found) > 1:
            out += [v.table, ""]
        for f in found:
            out += [f"{f.name.capitalize()} seeds ({_seed_list(f.seeds)}): {f.verdict.verdict}.", "", f.verdict.table, ""]
    for path in figures(spec, runs, fig_dir, spec.name):
        out += [f"![{path.stem}]({path.relative_to(report_dir).as_posix()})", ""]
    out += completions_table(spec, runs)
    return "\n".join(out), results


SHOWN_PER_STEP = 2  # completions shown per variant at its first and at its last step


def _logged_completions(path: Path) -> tuple[list[dict], int]:
    """The well-formed records of a completions.jsonl (a mapping with an integer step, prompt and
    completion strings and a numeric reward), and how many non-empty lines were not: a line cut by
    a kill, or a file edited by hand, is left out rather than stopping the report."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError):
        return [], 1
    rows = []
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and type(r.get("step")) is int and isinstance(r.get("prompt"), str) \
                and isinstance(r.get("completion"), str) and type(r.get("reward")) in (int, float):
            rows.append(r)
    return rows, len(lines) - len(rows)


def completions_table(spec: SweepSpec, runs: list[Run]) -> list[str]:
    """What the model wrote, for a real model: per variant, the lowest seed's run, SHOWN_PER_STEP
    logged completions (completions.jsonl) at step 1 and at its last step. [] when no run logged any
    or the model is the built-in tiny one."""
    from grpo_core.run import COMPLETIONS

    rows, notes = [], []
    for key, group in _group(spec, runs).items():
        run = min(group, key=lambda r: r.point["seed"])
        path = run.folder / COMPLETIONS if run.folder is not None else None
        if run.config.get("model") == "tiny" or path is None or not path.is_file():
            continue
        logged, bad = _logged_completions(path)
        if bad:
            notes.append(f"{run.folder.name}/{COMPLETIONS}: {bad} line(s) left out (cut, unreadable or not a "
                         f"completion record)")
        if not logged:
            continue
        last = max(r["step"] for r in logged)
        for step in sorted({1, last}):
            for r in [r for r in logged if r["step"] == step][:SHOWN_PER_STEP]:
                text = r["completion"].replace("|", "/").replace("\n", " ⏎ ")
                rows.append(f"| {_label(key) or '–'} | {run.point['seed']} | {step} | {r['prompt'][:60].replace('|', '/')} "
                            f"| `{text[:80]}` | {r['reward']:g} |")
    if not rows and not notes:
        return []
    table = ["What the model wrote (completions.jsonl; per variant its lowest seed, at step 1 and at its last step):",
             "", "| variant | seed | step | prompt | completion | reward |", "|---|---|---|---|---|---|", *rows, ""]
    return (table if rows else []) + [f"- {n}" for n in notes] + ([""] if notes else [])
