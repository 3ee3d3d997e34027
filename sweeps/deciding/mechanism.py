"""Manipulation checks: whether a claim's mechanism was at work in the runs that test it.

A null ("no effect detected", "equivalent") says something only where the mechanism the claim
names could act: a clip that never binds cannot show what clipping does, nor completions cut at the
cap what the length normalization does. A claim spec declares its checks in `report.mechanism`
(sweeps/report_spec.py validates them), each a metric of the run folders, the arms where it is read
and a threshold, with the reason. Per arm (grid point without the seed) the value is the median
over its runs of one number per run:

- a summary key (summary.json; a censored one that never happened counts as never: +inf), or
- a per-step key of metrics.jsonl over the steps `steps` selects (all; off_policy, the steps that
  reuse a generation batch; from:N; first:N), reduced by `per_run`: mean, max, min, or
  share_clipped (the share of those steps whose grad_norm exceeded a max_grad_norm > 0: clipping
  bound); `grad_norm_to_optimizer` is the gradient's norm as the optimizer received it, after
  clipping (grad_norm, logged before clipping, capped at the run's max_grad_norm > 0).

With `ratio_to: {axis: value}` a run's number is divided by that of the run of the same seed (and
the same other axes) at that value: "the ×10 arm's step-1 gradient reaches the optimizer ×10" is
a ratio to the ×1 arm's, which a clip that binds brings down (claim C4).

A check passes when every arm it names meets its threshold (at_least / at_most); while an arm it
names has no finished run (a spec still in training) it is not read; an arm whose finished runs
give no number for it (a metric no run logs, steps no run reaches) fails it, said in its row. A null verdict of a
test it gates whose check fails reads "mechanism not engaged" (gated); every verdict shows the
check's values."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional

from . import statistics as st
from .runs import Run, _label
from .verdicts import Verdict, _group, is_null
from ..report_spec import SUMMARY_METRICS

if TYPE_CHECKING:  # a type only: the sweep spec builds configs (torch); the verdicts read its data
    from ..spec import SweepSpec

MECHANISM_NOT_ENGAGED = "mechanism not engaged"


@dataclass
class MechanismResult:
    what: str  # the check in words, from the spec
    passed: Optional[bool]  # None: no run of the arms it names
    values: list  # (arm label, value) per arm it reads
    threshold: str  # "≥ 0.02"
    tests: Optional[list]  # the spec's test indices it gates; None: every test

    def state(self) -> str:
        return {True: "engaged", False: MECHANISM_NOT_ENGAGED.replace("mechanism ", ""), None: "not read"}[self.passed]

    def values_text(self, sep: str = "; ") -> str:
        """Each arm's value, "loss_type=dapo: 0.0012" (never: +inf; –: not read)."""
        return sep.join(f"{label}: {_fmt(v)}" if label else _fmt(v) for label, v in self.values) or "no runs"

    def text(self) -> str:
        """ "the clipped arm clips …: loss_type=dapo: 0.0012 (needs ≥ 0.02): not engaged"."""
        return f"{self.what}: {self.values_text()} (needs {self.threshold}): {self.state()}"


def _fmt(v: float) -> str:
    if math.isinf(v):
        return "never" if v > 0 else "−inf"
    return "–" if math.isnan(v) else f"{v:.3g}"


def _steps(run: Run, which: str) -> list[dict]:
    """The per-step rows of `run` that a check reads (see the module's docstring)."""
    rows = run.metrics
    if which == "all":
        return rows
    if which == "off_policy":  # a generation batch feeds k × μ optimizer steps; all but its first reuse it
        cfg = run.config
        accumulation = cfg.get("gradient_accumulation_steps") or 1
        k = (cfg.get("steps_per_generation") or accumulation) // accumulation
        reuse = k * (cfg.get("num_iterations") or 1)
        return [m for m in rows if (m["step"] - 1) % reuse != 0]
    kind, _, n = which.partition(":")
    return [m for m in rows if (m["step"] >= int(n) if kind == "from" else m["step"] <= int(n))]


TO_OPTIMIZER = "grad_norm_to_optimizer"  # grad_norm after clipping: what the optimizer was given


def _step_value(run: Run, row: dict, metric: str):
    if metric == TO_OPTIMIZER:
        norm, limit = row.get("grad_norm"), run.config.get("max_grad_norm") or 0
        return None if not isinstance(norm, (int, float)) else (min(norm, limit) if limit > 0 else norm)
    return row.get(metric)


def run_value(run: Run, check: dict) -> float:
    """One run's number for a check: its summary value, or its selected steps reduced."""
    metric = check["metric"]
    if metric in SUMMARY_METRICS:
        return run.value(metric)
    rows = _steps(run, check.get("steps", "all"))
    reduce = check.get("per_run", "mean")
    if reduce == "share_clipped":
        limit = run.config.get("max_grad_norm") or 0
        return sum(limit > 0 and m["grad_norm"] > limit for m in rows) / len(rows) if rows else math.nan
    values = [v for m in rows if isinstance(v := _step_value(run, m, metric), (int, float))]
    if not values:
        return math.nan
    return {"mean": sum(values) / len(values), "max": max(values), "min": min(values)}[reduce]


def ratio_value(run: Run, runs: list[Run], check: dict) -> float:
    """A run's number divided by that of its reference run (check["ratio_to"]: the run with the
    same point but that axis at that value); nan where there is none or it is 0."""
    ((axis, level),) = check["ratio_to"].items()
    want = {**run.point, axis: level}
    ref = next((r for r in runs if r.point == want), None)
    if ref is None:
        return math.nan
    base = run_value(ref, check)
    return run_value(run, check) / base if base else math.nan


def _in_arms(point: dict, arms: dict) -> bool:
    return all(point.get(axis) in values for axis, values in arms.items())


def _arms_named(spec: SweepSpec, check: dict) -> tuple:
    """The grid points without the seed (as _group keys them) whose arms a check reads: every
    point of the grid, or those in its `arms`."""
    axes = list(spec.grid)
    keys = (tuple(zip(axes, combo)) for combo in itertools.product(*(spec.grid[a] for a in axes)))
    return tuple(k for k in keys if _in_arms(dict(k), check.get("arms") or {}))


def mechanism_checks(spec: SweepSpec, runs: list[Run]) -> list[MechanismResult]:
    """Each check the spec declares, read on its runs (both seed sets)."""
    out = []
    for check in spec.report.get("mechanism") or []:
        chosen = [r for r in runs if _in_arms(r.point, check.get("arms") or {})]
        # an arm the check names with no finished run yet is not read (–), not left out
        groups = _group(spec, chosen, every=_arms_named(spec, check) if chosen else ())
        one = (
            (lambda r, c=check: ratio_value(r, runs, c))
            if check.get("ratio_to")
            else (lambda r, c=check: run_value(r, c))
        )
        values = [
            (_label(key), st.median([x for r in group if not math.isnan(x := one(r))])) for key, group in groups.items()
        ]
        # an arm with finished runs whose number cannot be computed (a metric no run logs, a key that
        # holds no numbers, steps no run reaches) fails the check; only an arm with no finished run is not read
        uncomputable = [label for (label, v), group in zip(values, groups.values()) if group and math.isnan(v)]
        if "at_least" in check:
            bound, threshold = float(check["at_least"]), f"≥ {check['at_least']:g}"
            meets = [v >= bound for _, v in values]
        else:
            bound, threshold = float(check["at_most"]), f"≤ {check['at_most']:g}"
            meets = [v <= bound for _, v in values]
        passed = False if uncomputable else None if not values or any(math.isnan(v) for _, v in values) else all(meets)
        if uncomputable:
            threshold += f"; cannot be computed on the finished runs of {', '.join(label or 'every arm' for label in uncomputable)}"
        out.append(MechanismResult(check["what"], passed, values, threshold, check.get("tests")))
    return out


def gates_test(result: MechanismResult, index: int) -> bool:
    """Whether a check gates the spec's test `index` (a reward-AUC twin: its original's index)."""
    return result.tests is None or index in result.tests


def gated(v: Verdict, checks: list[MechanismResult]) -> Verdict:
    """A verdict with the checks that gate it attached (the report prints them beside it); a null
    whose check failed (or could not be read) reads "mechanism not engaged": the runs could not have
    shown the effect, so the null says nothing about the claim. What the runs alone read is kept."""
    failed = [r for r in checks if r.passed is not True]
    if not failed or not is_null(v.verdict):
        return replace(v, checks=checks)
    why = "; ".join(r.text() for r in failed)
    return replace(
        v,
        verdict=MECHANISM_NOT_ENGAGED,
        checks=checks,
        reason=f"the claim's mechanism was not at work in these runs ({why}), so a null result says nothing "
        f"about it; the runs alone read {v.verdict}: {v.reason}",
    )
