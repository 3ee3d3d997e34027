"""What the claims report reads: a claim spec's `report` section, checked before anything runs
(validate_report), the tests it asks for with their reward-AUC twins (report_tests), and the
finished run folders of its sweep (collect_runs). Needs neither Optuna nor MLflow."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional
from pathlib import Path

import yaml

from sweeps import statistics as st
from grpo_core.config.values import short_value
from grpo_core.util.errors import UserInputError
from grpo_core.run import read_metrics
from grpo_core.record.run_metrics import CENSORED

from .spec import SweepSpec, check_seeds


ALPHA = 0.05
QUICK_KEYS = ("max_steps", "seeds", "replication_seeds", "grid")  # a spec's `quick`: what --quick changes
TEST_KINDS = ("paired", "differ", "zero_loss_step1", "placebo")
FIGURE_KINDS = ("reward", "early_loss", "completion_length")
NOTE_KINDS = ("noise_loss_floor", "zero_std_share")  # a test's `note`: computed by sweeps/verdicts.py (NOTES)


def _label(pairs) -> str:
    """A grid point as text: `learning_rate=0.0001, seed=3`."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in pairs)


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
        check_seeds(spec.path, f"quick.{key}", quick.get(key, []))  # the rule of the spec's own seed lists
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
            if test.get("note") is not None and test["note"] not in NOTE_KINDS:
                raise UserInputError(f"{where}.tests[{i}].note: {test['note']!r}; allowed: {', '.join(NOTE_KINDS)}")
            if "claimed_effect" in test and not isinstance(test["claimed_effect"], (int, float)):
                raise UserInputError(f"{where}.tests[{i}].claimed_effect: allowed: a number (the paired "
                                     f"difference treatment − control the source claims)")
    _check_quick(spec)  # after the tests: a quick section refers to the grid the tests are checked against


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
