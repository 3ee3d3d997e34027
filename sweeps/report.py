"""The claims report: per claim a table over variants, statistical tests, a verdict derived from
them by code, and figures. Reads the trial run folders a sweep wrote (config.yaml, summary.json,
metrics.jsonl), so it needs neither Optuna nor MLflow."""

from __future__ import annotations

import json
import math
import statistics as pystats
from dataclasses import dataclass
from pathlib import Path

import yaml

from grpo_core import statistics as st
from grpo_core.errors import UserInputError

from .spec import SweepSpec

ALPHA = 0.05
TEST_KINDS = ("better", "differ", "zero_loss_step1")
FIGURE_KINDS = ("reward", "early_loss", "completion_length")
CENSORED = ("steps_to_learn", "loss_departure_step")


@dataclass
class Run:
    point: dict  # grid axis values and seed
    config: dict
    summary: dict
    metrics: list

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


def validate_report(spec: SweepSpec) -> None:
    """Check a claim spec's `report` section before anything runs."""
    rep = spec.report
    where = f"{spec.path}: report"
    if not rep.get("tests"):
        raise UserInputError(f"{where}.tests: missing; a claim needs at least one test behind its verdict")
    for fig in rep.get("figures", []):
        if fig not in FIGURE_KINDS:
            raise UserInputError(f"{where}.figures: unknown figure {fig!r}; allowed: {', '.join(FIGURE_KINDS)}")
    for i, test in enumerate(rep["tests"]):
        kind = test.get("kind")
        if kind not in TEST_KINDS:
            raise UserInputError(f"{where}.tests[{i}].kind: {kind!r}; allowed: {', '.join(TEST_KINDS)}")
        if kind == "zero_loss_step1":
            continue
        axis = test.get("axis")
        if axis not in spec.grid:
            raise UserInputError(f"{where}.tests[{i}].axis: {axis!r} is not a grid axis ({', '.join(spec.grid)})")
        if kind == "better":
            values = spec.grid[axis]
            for v in [*test.get("treatment", []), test.get("control")]:
                if v not in values:
                    raise UserInputError(f"{where}.tests[{i}]: {v!r} is not a value of grid axis {axis} {values}")
            if test.get("direction") not in ("lower", "higher"):
                raise UserInputError(f"{where}.tests[{i}].direction: allowed: lower, higher")


def collect_runs(runs_root: Path, spec: SweepSpec) -> tuple[list[Run], int]:
    """Finished runs of a sweep, and how many trial folders did not finish."""
    runs, unfinished = [], 0
    for folder in sorted((runs_root / spec.name).glob("trial-*")):
        summary_path = folder / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        if summary.get("status") != "finished":
            unfinished += 1
            continue
        config = yaml.safe_load((folder / "config.yaml").read_text())
        metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
        point = {axis: config[axis] for axis in spec.grid}
        point["seed"] = config["seed"]
        runs.append(Run(point, config, summary, metrics))
    # a grid point can have a failed trial and, after a rerun, a finished one: keep one per point
    unique = {tuple(sorted(r.point.items())): r for r in runs}
    return list(unique.values()), unfinished


def _variant_key(spec: SweepSpec, run: Run, exclude: tuple = ()) -> tuple:
    return tuple((a, run.point[a]) for a in spec.grid if a not in exclude)


def _label(pairs) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in pairs)


def _fmt_steps(v: float, max_steps: int) -> str:
    if math.isnan(v):
        return "–"
    return f">{max_steps}" if math.isinf(v) else f"{v:g}"


def _group(spec: SweepSpec, runs: list[Run], exclude: tuple = ()) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault(_variant_key(spec, r, exclude), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: [str(v) for _, v in kv[0]]))


# ---- tables -------------------------------------------------------------------------------------
def variant_table(spec: SweepSpec, runs: list[Run]) -> str:
    max_steps = runs[0].config["max_steps"] if runs else 0
    show_length = "completion_length" in spec.report.get("figures", [])
    head = ["variant", "n", "learned", "median steps_to_learn [95% CI]", "median loss_departure_step",
            "final reward (mean ± sd)"]
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
               _fmt_steps(st.median(dep), max_steps), f"{pystats.mean(final):.3f} ± {sd:.3f}"]
        if show_length:
            row.append(f"{pystats.mean(r.value('final:completions/mean_length') for r in group):.2f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# ---- tests and verdicts -----------------------------------------------------------------------
@dataclass
class Verdict:
    statement: str
    verdict: str  # "holds", "does not hold", "holds only under ..."
    reason: str
    table: str


def _combine(statement: str, rows: list[tuple[str, bool, str]], table: str, best_p: list[float]) -> Verdict:
    """rows: (label, significant, _); best_p: the smallest p each comparison could reach with its
    sample sizes. If none could reach significance after Holm, the data cannot decide."""
    holding = [label for label, ok, _ in rows if ok]
    reachable = [p * len(best_p) < ALPHA for p in best_p]
    if rows and not any(reachable):
        smallest = min(best_p) if best_p else math.nan
        return Verdict(statement, "inconclusive (too few seeds)",
                       f"with these sample sizes the smallest possible Holm-adjusted p is "
                       f"{smallest * len(best_p):.3g} ≥ {ALPHA}", table)
    if rows and len(holding) == len(rows):
        verdict = "holds"
    elif not holding:
        verdict = "does not hold"
    else:
        verdict = "holds only under " + "; ".join(holding)
    reason = f"{len(holding)} of {len(rows)} comparisons significant at Holm-adjusted p < {ALPHA}"
    return Verdict(statement, verdict, reason, table)


def check_better(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """One-sided rank test of each treatment against the control, in every stratum of the other
    axes; Holm across all comparisons. A comparison holds when significant in the expected way."""
    axis, metric = test["axis"], test["metric"]
    alternative = "less" if test["direction"] == "lower" else "greater"
    max_steps = runs[0].config["max_steps"] if runs else 0
    comparisons = []
    for stratum, group in _group(spec, runs, exclude=(axis,)).items():
        control = [r.value(metric) for r in group if r.point[axis] == test["control"]]
        for treatment in test["treatment"]:
            treated = [r.value(metric) for r in group if r.point[axis] == treatment]
            p = st.rank_test(treated, control, alternative)
            best = st.rank_test(list(range(len(treated))), list(range(len(treated), len(treated) + len(control))),
                                "less")  # perfectly separated samples of these sizes
            comparisons.append((stratum, treatment, treated, control, p, best))
    adjusted = st.holm([c[4] for c in comparisons])
    fmt = (lambda v: _fmt_steps(v, max_steps)) if metric in CENSORED else (lambda v: f"{v:.3f}")
    rows, lines = [], [f"| stratum | {axis} | median {metric} | control ({axis}={test['control']}) | p | Holm p | significant |",
                       "|---|---|---|---|---|---|---|"]
    for (stratum, treatment, treated, control, p, _), p_adj in zip(comparisons, adjusted):
        ok = not math.isnan(p_adj) and p_adj < ALPHA
        label = _label(stratum) or "all runs"
        rows.append((f"{label} ({axis}={treatment})" if len(test["treatment"]) > 1 else label, ok, ""))
        lines.append(f"| {label} | {treatment} | {fmt(st.median(treated))} | {fmt(st.median(control))} | "
                     f"{p:.3g} | {p_adj:.3g} | {'yes' if ok else 'no'} |")
    return _combine(test["statement"], rows, "\n".join(lines), [c[5] for c in comparisons])


def check_differ(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """Kruskal-Wallis across the levels of `axis` in every stratum of the other axes; Holm."""
    axis, metric = test["axis"], test["metric"]
    strata = list(_group(spec, runs, exclude=(axis,)).items())
    pvals, best = [], []
    for _, group in strata:
        levels = [[r.value(metric) for r in group if r.point[axis] == v] for v in spec.grid[axis]]
        pvals.append(st.kruskal_test(levels))
        sizes, start, separated = [len(level) for level in levels], 0, []
        for n in sizes:  # perfectly separated groups of the same sizes
            separated.append(list(range(start, start + n)))
            start += n
        best.append(st.kruskal_test(separated))
    adjusted = st.holm(pvals)
    rows, lines = [], [f"| stratum | medians of {metric} by {axis} | Kruskal-Wallis p | Holm p | significant |",
                       "|---|---|---|---|---|"]
    max_steps = runs[0].config["max_steps"] if runs else 0
    for (stratum, group), p, p_adj in zip(strata, pvals, adjusted):
        meds = []
        for v in spec.grid[axis]:
            med = st.median([r.value(metric) for r in group if r.point[axis] == v])
            meds.append(f"{v}: {_fmt_steps(med, max_steps) if metric in CENSORED else f'{med:.3g}'}")
        ok = not math.isnan(p_adj) and p_adj < ALPHA
        label = _label(stratum) or "all runs"
        rows.append((label, ok, ""))
        lines.append(f"| {label} | {', '.join(meds)} | {p:.3g} | {p_adj:.3g} | {'yes' if ok else 'no'} |")
    return _combine(test["statement"], rows, "\n".join(lines), best)


def check_zero_loss_step1(spec: SweepSpec, runs: list[Run], test: dict) -> Verdict:
    """Claim C1 from the runs' first step: grpo loss |·| ≤ 1e-6 with grad_norm > 0, the reward
    still rises (at least half the grpo runs learn), and bnpo with β = 0 has a non-zero loss."""
    grpo = [r for r in runs if r.config["loss_type"] == "grpo" and r.config["num_iterations"] == 1]
    bnpo0 = [r for r in runs if r.config["loss_type"] == "bnpo" and r.config["beta"] == 0]
    lines = ["| variant | n | max abs(loss) at step 1 | min grad_norm at step 1 | learned |", "|---|---|---|---|---|"]
    for key, group in _group(spec, runs).items():
        losses = [abs(r.metrics[0]["loss"]) for r in group]
        grads = [r.metrics[0]["grad_norm"] for r in group]
        learned = sum(r.summary["learned"] for r in group)
        lines.append(f"| {_label(key)} | {len(group)} | {max(losses):.2e} | {min(grads):.3g} | {learned}/{len(group)} |")
    zero = bool(grpo) and max(abs(r.metrics[0]["loss"]) for r in grpo) <= 1e-6
    grad = bool(grpo) and min(r.metrics[0]["grad_norm"] for r in grpo) > 0
    learns = bool(grpo) and sum(r.summary["learned"] for r in grpo) / len(grpo) >= 0.5
    bnpo_nonzero = bool(bnpo0) and min(abs(r.metrics[0]["loss"]) for r in bnpo0) > 1e-6
    checks = [("grpo step-1 |loss| ≤ 1e-6", zero), ("grpo step-1 grad_norm > 0", grad),
              ("at least half the grpo runs learn", learns)]
    verdict = "holds" if all(ok for _, ok in checks) else "does not hold"
    reason = "; ".join(f"{name}: {'yes' if ok else 'no'}" for name, ok in checks)
    reason += f"; corollary (#2995) bnpo with β = 0 has step-1 loss ≠ 0 in every run: {'yes' if bnpo_nonzero else 'no'}"
    return Verdict(test["statement"], verdict, reason, "\n".join(lines))


TESTS = {"better": check_better, "differ": check_differ, "zero_loss_step1": check_zero_loss_step1}


def verdicts(spec: SweepSpec, runs: list[Run]) -> list[Verdict]:
    return [TESTS[t["kind"]](spec, runs, t) for t in spec.report["tests"]]


# ---- figures --------------------------------------------------------------------------------------
def _smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def figures(spec: SweepSpec, runs: list[Run], fig_dir: Path, prefix: str) -> list[Path]:
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
            fig, axes = plt.subplots(1, len(cols), figsize=(6.5 * len(cols), 4), dpi=100, squeeze=False)
            for ax, (key, title, limit, smooth) in zip(axes[0], cols):
                for vkey, group in _group(spec, task_runs, exclude=("task",)).items():
                    curves = [_smooth([m[key] for m in r.metrics][:limit], smooth) for r in group]
                    mean, lo, hi = st.mean_band(curves)
                    steps = list(range(1, len(mean) + 1))
                    line, = ax.plot(steps, mean, lw=1.5, label=_label(vkey))
                    ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15)
                if kind == "reward":
                    base = pystats.mean(r.summary["baseline_reward"] for r in task_runs)
                    ax.axhline(base, color="grey", ls="--", lw=1, label="baseline")
                ax.set_title(f"{spec.text.get('claim', spec.name)} · {task} · {title}", fontsize=9)
                ax.set_xlabel("step")
                ax.legend(fontsize=7, loc="best")
            fig.tight_layout()
            path = fig_dir / f"{prefix}-{kind}-{task}.png"
            fig.savefig(path)
            plt.close(fig)
            paths.append(path)
    return paths


# ---- the report -----------------------------------------------------------------------------------
def claim_section(spec: SweepSpec, runs: list[Run], unfinished: int, fig_dir: Path, report_dir: Path,
                  command: str) -> tuple[str, list[Verdict]]:
    claim = spec.text.get("claim", spec.name)
    out = [f"## {claim} — {spec.path and Path(spec.path).stem}", ""]
    for key in ("source", "hypothesis", "expected", "notes"):
        if key in spec.text:
            out.append(f"- **{key.capitalize()}:** {spec.text[key]}")
    max_steps = runs[0].config["max_steps"] if runs else spec.base.get("max_steps")
    seeds = sorted({r.point["seed"] for r in runs})
    grid = "; ".join(f"{k} ∈ {v}" for k, v in spec.grid.items())
    out += [f"- **Settings:** {grid}; seeds {seeds}; max_steps {max_steps}; base {json.dumps(spec.base)}",
            f"- **Runs:** {len(runs)} finished" + (f", {unfinished} not finished (left out)" if unfinished else ""),
            f"- **Command:** `{command}` (sweep `{spec.name}`, MLflow experiment `{spec.experiment}`)", ""]
    if not runs:
        out += ["No finished runs: no verdict.", ""]
        return "\n".join(out), []
    results = verdicts(spec, runs)
    for v in results:
        out.append(f"**Verdict: {v.verdict}** — {v.statement}. ({v.reason}.)")
        out.append("")
    out += [variant_table(spec, runs), ""]
    for v in results:
        out += [f"Test behind “{v.statement}”:", "", v.table, ""]
    for path in figures(spec, runs, fig_dir, spec.name):
        out += [f"![{path.stem}]({path.relative_to(report_dir).as_posix()})", ""]
    return "\n".join(out), results
