"""The power model against what happened: for each known effect (the positive controls, and the tests
a claim spec declares `known_effect`), the verdict it read beside the power the models gave it
(docs/concepts/verdicts.md prints this table):

    python -m sweeps.reporting.calibration

Per test and metric: the paired difference over both seed sets (Hodges-Lehmann: the typical pair's); the smallest effect each set
alone detects with 80% power under the shift model (every pair moved alike: the report's
"detectable" column); the verdict's power (supported on both sets) at that difference
(the tied model, power.verdict_power: whole-step moves, ties kept) and from each set's own
differences resampled as they are (power.observed_power); and the verdict the report read. A model
is calibrated where the effects it gives most power came out supported and those it gives little
did not."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from ..deciding import power, statistics as st
from ..deciding.gates import POSITIVE_CONTROL
from ..deciding.replication import STEP_METRICS, replicated_verdicts
from ..paths import REAL_CPU_EXPERIMENTS, REAL_CPU_RESULTS
from ..report_spec import compared_metric, report_tests
from ..spec import load_spec
from .report_inputs import collect_runs

HEAD = [
    "| spec | test | metric | paired difference (Hodges-Lehmann, both sets) | shift model: detectable per set | "
    "tied model: verdict power at that difference | own differences: verdict power | verdict read |",
    "|---|---|---|---|---|---|---|---|",
]


def calibration_rows(spec_path: Path, runs_root: Path) -> list[str]:
    spec = load_spec(spec_path, check_points=False)
    runs, _ = collect_runs(runs_root, spec)
    known = spec.text.get("claim") == POSITIVE_CONTROL
    rows = []
    for test, (v, found) in zip(report_tests(spec), replicated_verdicts(spec, runs)):
        original = test if "twin_of" not in test else spec.report["tests"][test["twin_of"]]
        if test["kind"] != "paired" or not (known or original.get("known_effect")) or not v.facts:
            continue
        metric = compared_metric(test)
        sets = [f.verdict.comparisons[0].diffs for f in found]
        m = max(len(f.verdict.comparisons) for f in found)
        shift_hl = st.hodges_lehmann([d for s in sets for d in s])[0]  # the typical pair's shift, both sets
        whole = metric in STEP_METRICS
        tied = power.verdict_power(sets, abs(shift_hl), m, test["direction"], whole_steps=whole)
        own = power.observed_power(sets, m, test["direction"])
        shift = v.facts["detectable"]
        label = f"{test['treatment'][0]} − {test['control']}"
        rows.append(
            f"| {spec_path.stem} | {label} | {metric} | {shift_hl:+.3g} | {shift:.3g} | {tied:.0%} | {own:.0%} | "
            f"{v.verdict} |"
        )
    return rows


def rows_over_specs(specs: list[str], runs_root: Path, rows_of) -> list[str]:
    """`rows_of(spec path, runs_root)` for each spec named (default: every real-model CPU spec) whose
    sweep has a run folder under runs_root: the table rows of this module's and sequential_sim's commands."""
    paths = [Path(p) for p in specs] or sorted(REAL_CPU_EXPERIMENTS.glob("*.yaml"))
    return [
        row
        for p in paths
        if (runs_root / load_spec(p, check_points=False).name).is_dir()
        for row in rows_of(p, runs_root)
    ]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.reporting.calibration", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "specs", nargs="*", help="specs to read (default: every real-model CPU spec with a known effect)"
    )
    parser.add_argument("--runs", default=str(REAL_CPU_RESULTS / "runs"), help="their run folders")
    args = parser.parse_args(argv)
    rows = rows_over_specs(args.specs, Path(args.runs), lambda p, runs: calibration_rows(p, runs))
    print("\n".join(HEAD + rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
