"""The claims report, rendered: per claim a section with the variants' table, each test's verdict
and table, what it could detect, figures and completions. The verdicts come from sweeps/deciding/verdicts.py
(and the gates of sweeps/deciding/gates.py); this module only writes them as Markdown and figures."""

from __future__ import annotations

import json
import math
import statistics as pystats
from typing import Callable, Optional, Union
from pathlib import Path

from sweeps.deciding import statistics as st
from grpo_core.record.run_metrics import CENSORED, trailing_average

from ..deciding.power import MOST_SEEDS, TARGET_TEXT
from .. import arms
from ..spec import SweepSpec, point_key
from ..deciding.gates import PositiveRecord, incomplete, positive_record, rests_on_steps_to_learn, unproven, withheld
from ..deciding.mechanism import gated, gates_test, mechanism_checks
from .declared import margins_line, mechanism_line, sequential_line
from .positive_gate import effects_brief
from ..deciding.runs import Run, _label
from ..report_spec import compared_metric, margin_of, report_tests
from ..deciding.replication import STEP_METRICS
from ..deciding.sequential import sequential_lines, test_reading
from ..deciding.replication import _seed_list, replicated_verdicts, seed_sets
from ..deciding.verdicts import Verdict, _fmt_steps, _group, _unit, fmt_value, is_supported


def variant_table(spec: SweepSpec, runs: list[Run]) -> str:
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
               f"{_fmt_steps(st.median(stl))} [{_fmt_steps(lo)}, {_fmt_steps(hi)}]",
               _fmt_steps(st.median(dep)).replace("not learned", "never"),
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
    """One line on what a paired or differ test could detect, from Verdict.facts ('' without facts)."""
    f = v.facts
    if not f:
        return ""
    det_text = detectable_text(f)
    if math.isinf(f["detectable"]):
        det_text += " (too few pairs for p < α/m)"
    control = "; ".join(f"{(label + ': ') if label else ''}median " + fmt_value(med, f["metric"])
                        + (f", {cens} of {n} never learned" if f["metric"] in CENSORED else "")
                        for label, med, cens, n in f["control"])
    levels = "levels_of" in f  # a test across several levels: one level shifted from the others
    target = ""
    if "target" in f:  # steps: what the seed counts were to be chosen for
        needed = f"{f['needed'] or f'more than {MOST_SEEDS}'} {'seeds' if levels else 'pairs'} per set"
        target = f"; to detect the target, {TARGET_TEXT} ({f['target']:.3g} steps), these differences need {needed}"
    if levels:
        axis = f["levels_of"].split("=")[0]
        return (f"n per set {' and '.join(map(str, f['n_per_set']))} seeds with every level; smallest shift of one "
                f"{axis} level each set alone detects with 80% power: {det_text} (simulated with this test, from "
                f"these runs' differences between levels); first level ({f['levels_of']}): {control}{target}")
    tied = ""
    if "detectable_tied" in f:  # the tied model: the effect moves only as many pairs as differ here
        tied = (f"; {detectable_text({**f, 'detectable': f['detectable_tied']})} if it moves only "
                f"{f['moved']:.0%} of the pairs, as many as differ here, and leaves the rest tied (the tied model)")
    return (f"n per set {' and '.join(map(str, f['n_per_set']))}; smallest effect each set alone detects with 80% "
            f"power: {det_text} if it moves every pair alike (the shift model, simulated with this test from these "
            f"runs' paired differences){tied}; control arm: {control}{target}{verdict_power_text(f)}")


def verdict_power_text(f: dict) -> str:
    """The verdict's own power (both seed sets significant on the claimed side) at the effect that
    matters, from the tied model (power.verdict_power), as a clause; '' where it was not computed."""
    if "verdict_power" not in f:
        return ""
    at = (f"{f['power_at']:.3g} steps (the target)" if f["metric"] in CENSORED and _unit(f["metric"]) == "steps"
          else f"{f['power_at']:g} (the declared margin)")
    return (f"; power of this verdict, supported on both seed sets, at an effect of {at}: {f['verdict_power']:.0%} "
            f"(the tied model: whole-step moves, its ties kept; calibrated on the known effects in "
            f"docs/concepts/verdicts.md)")




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
    rows: dict = {}
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
def _missing_points(spec: SweepSpec, runs: list[Run]) -> list[dict]:
    """The spec's grid points (seed included) that have no finished run among `runs`."""
    done = {point_key(r.point) for r in runs}
    return [p for p in spec.grid_points() if point_key(p) not in done]


def _reads(test: dict) -> Callable[[dict], bool]:
    """Whether a test reads a grid point: a paired test on an axis reads only the points at its
    treatment and control levels; any other test reads every point."""
    axis = test.get("axis") if test["kind"] == "paired" else None
    if axis is None or test.get("control") is None:
        return lambda point: True
    levels = [*test.get("treatment", []), test["control"]]
    return lambda point: point.get(axis) in levels


def _test_completion(spec: SweepSpec, test: dict, missing: list[dict]) -> Optional[tuple[int, int]]:
    """(finished, expected) grid points among those a test reads, or None when all of them have a
    finished run (an arm added to a spec after its other arms' runs leaves the tests of those arms
    decided while it trains)."""
    reads = _reads(test)
    points, missing = [p for p in spec.grid_points() if reads(p)], [p for p in missing if reads(p)]
    return (len(points) - len(missing), len(points)) if missing else None


def known_effects(spec: SweepSpec, runs: list[Run], tests: list[dict], results: list[Verdict],
                  missing: list[dict]) -> list[PositiveRecord]:
    """The spec's tests declared `known_effect` (an effect its own runs show, declared as the
    evidence of what its regime's tests can detect), as gates of the nulls of their set-up: open
    when the test and its reward-AUC twin read supported."""
    out = []
    for i, (test, v) in enumerate(zip(tests, results)):
        if not test.get("known_effect") or "twin_of" in test:
            continue
        twin = results[i + 1] if i + 1 < len(tests) and tests[i + 1].get("twin_of") == spec_test_indices(tests)[i] else None
        pair = [v] + ([twin] if twin is not None else [])
        failed = [w for w in pair if not is_supported(w.verdict)]
        reason = None if not failed else f"the known effect of this set-up ({v.statement}) reads {failed[0].verdict}"
        reads = _reads(test)
        out.append(positive_record(f"{Path(spec.path).stem}: {v.statement}", [r for r in runs if reads(r.point)],
                                   reason, _test_completion(spec, test, missing) is None,
                                   effects_brief(pair, tests[i:i + len(pair)])))
    return out


def _left_out_text(spec: SweepSpec, missing: list[dict], left_out: list[str]) -> str:
    """What the section's runs lack: folders left out (named, with why) and grid points with no finished run."""
    text = ""
    if left_out:
        text += f", {len(left_out)} folder(s) left out: " + "; ".join(left_out[:6]) + ("; …" if len(left_out) > 6 else "")
    if missing:
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in missing[:4])
        text += (f"; **{len(missing)} of {len(spec.grid_points())} grid points have no finished run** ({shown}"
                 + ("; …" if len(missing) > 4 else "") + "): the tests use the seeds that have both arms")
    return text


SHARED_PREFIX = "trial-shared-"  # a run another sweep trained, copied in (sweeps/driving/adopt.py)


def shared_source(folder_name: str) -> str:
    """The sweep that trained a shared run: after the last trial-shared- (a copy of a copy keeps its
    name), up to its own trial folder's name."""
    return folder_name.rsplit(SHARED_PREFIX, 1)[1].rsplit("-trial-", 1)[0]


def shared_arms(spec: SweepSpec, runs: list[Run]) -> str:
    """Which arms are runs another claim's sweep trained (the same config and seeds, copied in): the
    two claims' verdicts then rest on one realisation of that arm and are not independent evidence."""
    sources: dict = {}
    for r in runs:
        name = r.folder.name if r.folder is not None else ""
        if name.startswith(SHARED_PREFIX):
            source = shared_source(name)
            arm = _label((a, r.point[a]) for a in spec.grid) or "all runs"
            sources.setdefault((arm, source), []).append(r.point["seed"])
    return "; ".join(f"{arm}: {len(seeds)} runs are `{source}`'s (the same runs serve both claims, so their verdicts "
                     f"are not independent evidence)" for (arm, source), seeds in sources.items())


def made_on(spec: SweepSpec, runs: list[Run]) -> str:
    """'' when every run was made on one CPU with one MKL branch; else the runs per CPU and variant.
    Runs reproduce bit for bit only on their own MKL branch (AVX2 on Intel CPUs, AUTO on AMD), so a
    seed's arms made on different branches part from step 1 instead of sharing their first samples."""
    def cpu(r: Run) -> str:  # runs before 2026-11-25 recorded no branch: unknown, not another branch
        branch = r.summary.get("mkl_branch") or "not recorded"
        return f"{r.summary.get('device_name', 'not recorded')} (MKL branch {branch})"
    cpus = sorted({cpu(r) for r in runs})
    if len(cpus) < 2:
        return ""
    groups = _group(spec, runs)
    parts = []
    for name in cpus:
        counts = {key: sum(cpu(r) == name for r in group) for key, group in groups.items()}
        parts.append(f"{name}: {sum(counts.values())} runs ("
                     + ", ".join(f"{_label(key)} {n}" for key, n in counts.items() if n) + ")")
    branches = {r.summary["mkl_branch"] for r in runs if r.summary.get("mkl_branch")}
    why = (" MKL's float32 products differ between these branches in the last bits, so each run reproduces bit for "
           "bit only on a CPU of its own branch, and where a seed's variants were made on different branches "
           "they part from step 1 instead of sharing their first samples (docs/results.md#vendor)"
           if len(branches) > 1 else "")
    return "; ".join(parts) + "." + why


def spec_test_indices(tests: list[dict]) -> list[int]:
    """Per test of report_tests, the index of its test in the spec (a reward-AUC twin: its original's)."""
    out, index = [], -1
    for test in tests:
        if "twin_of" in test:
            out.append(test["twin_of"])
        else:
            index += 1
            out.append(index)
    return out


def borrowers(runs_root: Path, names: list[str]) -> dict[str, list[str]]:
    """Per sweep, the sweeps among `names` that hold copies of its runs (trial-shared-<it>-…)."""
    out: dict = {}
    for name in names:
        folder = runs_root / name
        sources = {shared_source(f.name) for f in (folder.glob(f"{SHARED_PREFIX}*") if folder.is_dir() else [])}
        for source in sources:
            out.setdefault(source, []).append(name)
    return out


Sensitivity = Union[str, Callable[[list, list[Run]], Optional[str]], None]


def claim_section(spec: SweepSpec, runs: list[Run], unfinished: list[str], fig_dir: Path, report_dir: Path,
                  command: str, untrusted: Optional[str] = None,
                  insensitive: Sensitivity = None, lent_to: Optional[list[str]] = None,
                  known: Optional[list] = None) -> tuple[str, list[Verdict]]:
    """The section of one claim spec and its verdicts. `untrusted`: why the placebo that calibrates
    steps_to_learn for these runs did not pass; the verdicts that rest on it are then withheld.
    `insensitive`: why the testbed's positive control did not pass (its "no effect detected"
    verdicts are then withheld: unproven), or, per test, a function of this spec's known effects and
    the runs the test reads that says why no known effect of their set-up gates it open
    (gates.sensitivity_gate). `known`: this spec's known effects are appended to it."""
    claim = spec.text.get("claim", spec.name)
    out = [f"## {claim} — {spec.path and Path(spec.path).stem}", ""]
    for key in ("source", "hypothesis", "expected", "notes"):
        if key in spec.text:
            out.append(f"- **{key.capitalize()}:** {spec.text[key]}")
    max_steps = runs[0].config["max_steps"] if runs else spec.base.get("max_steps")
    grid = "; ".join(f"{k} ∈ {v}" for k, v in spec.grid.items())
    if spec.arms:
        grid += f" (arms: {arms.describe(spec.arms)})"
    sets = "; ".join(f"{name} seeds {_seed_list(seeds)}" for name, seeds in seed_sets(spec))
    missing = _missing_points(spec, runs)
    out += [f"- **Settings:** {grid}; {sets}; max_steps {max_steps}; base {json.dumps(spec.base)}",
            f"- **Runs:** {len(runs)} finished" + _left_out_text(spec, missing, unfinished)
            + (f"; **{imprecise} run(s) had a baseline standard error above δ/4** (baseline_prompts too small)"
               if (imprecise := sum(r.summary.get("baseline_reward_se", 0) > r.config["stl_delta"] / 4 for r in runs))
               else ""),
            f"- **Command:** `{command}` (sweep `{spec.name}`, MLflow experiment `{spec.experiment}`)"]
    margins_at = None
    folder = runs[0].folder.parent if runs and runs[0].folder is not None else None
    if spec.report.get("margins"):
        margins_at = len(out)
        out.append(f"- **Equivalence margins:** {margins_line(spec.path, spec.report['margins'], folder)}")
    if spec.report.get("sequential"):
        out.append(f"- **Sequential design:** {sequential_line(spec.path, spec.report['sequential'], folder)}")
    if (checks := spec.report.get("mechanism") or []):
        when = mechanism_line(spec.path, checks, folder)
        out += [f"- **Mechanism check, declared:** {c['what']} ({c['reason']}; its metric, arms and threshold: {when})"
                for c in checks]
    if spec.report.get("mechanism_none"):
        out.append(f"- **Mechanism check:** none applies: {spec.report['mechanism_none']}")
    if (cpus := made_on(spec, runs)):
        out.append(f"- **Made on more than one CPU:** {cpus}")
    if (shared := shared_arms(spec, runs)):
        out.append(f"- **Shared arms:** {shared}")
    if lent_to:  # the other side of a shared arm: this sweep trained runs another claim's verdicts rest on too
        out.append(f"- **Shared arms:** runs of this sweep are also runs of {', '.join(f'`{n}`' for n in lent_to)} "
                   f"(copied, the same config and seeds): those verdicts and this one rest on one realisation of "
                   f"the arm, so they are not independent evidence")
    out.append("")
    if not runs:
        out += ["No finished runs: no verdict.", ""]
        return "\n".join(out), []
    tested = replicated_verdicts(spec, runs)
    tests = report_tests(spec)
    checks = mechanism_checks(spec, runs)
    tested = [(gated(v, [c for c in checks if gates_test(c, index)]), found)
              for (v, found), index in zip(tested, spec_test_indices(tests))]
    if untrusted:
        tested = [(withheld(v, untrusted) if rests_on_steps_to_learn(test) else v, found)
                  for (v, found), test in zip(tested, tests)]
    own = known_effects(spec, runs, tests, [v for v, _ in tested], missing) if spec.mode == "grid" else []
    if known is not None:
        known.extend(own)
    if margins_at is not None and hasattr(insensitive, "known"):  # what "equivalent within ±m" allows, in context
        beside = insensitive.known(own, runs)
        out[margins_at] += ("; beside the known effect of this set-up: " + "; ".join(f"{c.effects} (`{c.name}`)"
                                                                               for c in beside)
                            if beside else "; no known effect of this set-up to read them beside")
    if callable(insensitive):
        tested = [(unproven(v, why) if (why := insensitive(own, [r for r in runs if _reads(test)(r.point)])) else v,
                   found) for (v, found), test in zip(tested, tests)]
    elif insensitive:
        tested = [(unproven(v, insensitive), found) for v, found in tested]
    if spec.mode == "grid" and missing:
        tested = [(incomplete(v, *counts), found) if (counts := _test_completion(spec, test, missing)) else (v, found)
                  for (v, found), test in zip(tested, tests)]
    results = [v for v, _ in tested]
    for v, test in zip(results, tests):
        out.append(f"**Verdict: {v.verdict}** — {v.statement}. ({v.reason}.)")
        if (facts := facts_text(v)):
            out.append(f"*What it could detect:* {facts}.")
        for check in v.checks:
            out.append(f"*Mechanism check:* {check.text()}.")
        if test.get("known_effect"):
            out.append("*Known effect:* declared as this set-up's evidence of what its tests can detect; the *no "
                       "effect detected* verdicts of its set-up (over as many steps or fewer) rest on it.")
        out.append("")
    for statement in spec.report.get("needs_full_run", []):  # --quick: tests these runs cannot decide
        out += [f"**Not decided here: needs the full run** (`grpo reproduce`) — {statement}.", ""]
    out += [variant_table(spec, runs), ""]
    for (v, found), test in zip(tested, tests):
        out += [f"Test behind “{v.statement}”:", ""]
        if v.table and len(found) > 1:
            out += [v.table, ""]
        for f in found:
            out += [f"{f.name.capitalize()} seeds ({_seed_list(f.seeds)}): {f.verdict.verdict}.", "", f.verdict.table, ""]
        if spec.report.get("sequential") and test["kind"] == "paired":  # how the declared looks read these pairs
            margin = margin_of(spec, compared_metric(test), STEP_METRICS)
            out += sequential_lines(spec.report["sequential"], found, margin)
            v.sequential = test_reading(spec.report["sequential"], found, margin)
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
