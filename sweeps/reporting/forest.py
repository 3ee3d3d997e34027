"""One picture of every answer: a forest plot of each claim's paired differences (steps_to_learn on
the left, reward AUC on the right), one row per comparison and testbed, each seed set's estimate
with its 95% interval, the declared equivalence margin as a band, and the mechanism check's state.
Written by `grpo reproduce` beside REPORT.md (figures/forest.png); its rows come from the same
verdicts as the report's tables."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..deciding.replication import STEP_METRICS
from ..deciding.verdicts import Verdict
from ..report_spec import compared_metric, margin_of

SET_MARKERS = {"discovery": "o", "replication": "s", "all seeds": "D"}


@dataclass
class ForestRow:
    label: str  # "C3 · real model, CPU · noise 0.01 vs 0"
    verdict: str  # the steps test's verdict word
    check: Optional[bool]  # the mechanism check: True engaged, False not engaged, None none declared
    sequential: str = ""  # under a declared sequential design: where its test stands ("open at look 1 (8 pairs)")
    panels: dict = field(
        default_factory=dict
    )  # "steps" / "reward_auc": (margin or None, metric, [(set, est, low, high)])


def _short(verdict: str) -> str:
    return verdict.split(" (")[0]


def forest_rows(testbed: str, claim: str, spec, tests: list[dict], results: list[Verdict]) -> list[ForestRow]:
    """The rows of one spec: each paired test on steps (or another step metric) with its reward-AUC
    twin, one row per comparison (stratum or treatment)."""
    rows = []
    for i, (test, v) in enumerate(zip(tests, results)):
        if test["kind"] != "paired" or "twin_of" in test or not v.sets or compared_metric(test) not in STEP_METRICS:
            continue  # a test in other units (completions_to_learn, a final length) stays in its section
        twin = results[i + 1] if i + 1 < len(tests) and tests[i + 1].get("twin_of") is not None else None
        metric = compared_metric(test)
        checks = [c.passed for c in v.checks]
        check = None if not checks else (False if any(c is not True for c in checks) else True)
        labels = [c.label for c in v.sets[0][1]]
        for k, label in enumerate(labels):
            arms = f"{test['axis']} {', '.join(map(str, test['treatment']))} vs {test['control']}"
            where = "" if label == "all runs" else f" ({label})"
            row = ForestRow(f"{claim} · {testbed} · {arms}{where}", _short(v.verdict), check, v.sequential)
            row.panels["steps"] = (
                margin_of(spec, metric, STEP_METRICS),
                metric,
                [(name, cs[k].estimate, cs[k].low, cs[k].high) for name, cs in v.sets if k < len(cs)],
            )
            if twin is not None and twin.sets:
                row.panels["reward_auc"] = (
                    margin_of(spec, "reward_auc", STEP_METRICS),
                    "reward_auc",
                    [(name, cs[k].estimate, cs[k].low, cs[k].high) for name, cs in twin.sets if k < len(cs)],
                )
                row.verdict += f" | AUC: {_short(twin.verdict)}"
            rows.append(row)
    return rows


def forest_png(rows: list[ForestRow], path: Path) -> Optional[Path]:
    """The plot of `rows` (top to bottom as given) into `path`; None without rows."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = 1.4 + 0.36 * len(rows)  # (the results page shows the whole figure and the table under it on one screen)
    fig, axes = plt.subplots(1, 2, figsize=(16, height), sharey=True, gridspec_kw={"width_ratios": [1, 1]})
    for ax, panel, title in (
        (axes[0], "steps", "paired difference in steps (treatment − control; < 0: sooner)"),
        (axes[1], "reward_auc", "paired difference in reward AUC (> 0: more reward)"),
    ):
        for y, row in enumerate(rows):
            if panel not in row.panels:
                continue
            margin, metric, sets = row.panels[panel]
            if margin is not None:
                ax.add_patch(matplotlib.patches.Rectangle((-margin, y - 0.4), 2 * margin, 0.8, color="#d9f0d3", lw=0))
            color = {True: "black", False: "#b0b0b0", None: "#4a4a8a"}[row.check]
            for j, (name, est, low, high) in enumerate(sets):
                if math.isnan(est):
                    continue
                offset = (j - (len(sets) - 1) / 2) * 0.22
                lo = low if math.isfinite(low) else ax.get_xlim()[0]
                hi = high if math.isfinite(high) else ax.get_xlim()[1]
                ax.plot([lo, hi], [y + offset] * 2, color=color, lw=1.4)
                ax.plot(
                    [est],
                    [y + offset],
                    marker=SET_MARKERS.get(name, "o"),
                    color=color,
                    markerfacecolor="white" if row.check is False else color,
                    ms=5,
                )
        ax.axvline(0, color="#888888", lw=0.8, ls="--")
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(rows)))
    axes[0].set_yticklabels(
        [
            f"{r.label}\n{r.verdict}"
            + ("  [mechanism not engaged]" if r.check is False else "")
            + (f"  [sequential: {r.sequential}]" if r.sequential else "")
            for r in rows
        ],
        fontsize=7,
    )
    axes[0].invert_yaxis()
    fig.suptitle(
        "Every claim's effect per seed set (○ discovery, □ replication; 95% intervals), the declared "
        "equivalence margin (green band), grey hollow: mechanism check not passed",
        fontsize=9,
    )
    fig.subplots_adjust(left=0.31, right=0.98, top=1 - 0.9 / height, bottom=0.5 / height, wspace=0.05)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
