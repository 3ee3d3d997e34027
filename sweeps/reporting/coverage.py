"""How well the report's intervals cover what they are read as, measured on the runs' own paired
differences (docs/concepts/verdicts.md prints this table):

    python -m sweeps.reporting.coverage experiments/real/cpu/r3_advantage_noise_room_cpu.yaml …

For each paired test of each spec, on each seed set: the exact Hodges-Lehmann interval (95%, the
one printed beside every effect; 90%, the one equivalence reads) and how often it covers the mean
difference and the pseudo-median when that set's differences are resampled with replacement
(sweeps/deciding/statistics.py: hodges_lehmann_coverage)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from ..deciding import statistics as st
from ..deciding.replication import seed_sets
from ..deciding.verdicts import check_paired
from ..paths import REAL_CPU_RESULTS
from ..report_spec import report_tests
from ..spec import load_spec
from .report_inputs import collect_runs

HEAD = [
    "| spec | test | seed set | pairs | tied pairs | 95% covers mean | 95% covers pseudo-median | 90% covers mean |",
    "|---|---|---|---|---|---|---|---|",
]


def coverage_rows(spec_path: Path, runs_root: Path) -> list[str]:
    """The table's rows of one spec (its paired tests, steps and reward AUC, each seed set)."""
    spec = load_spec(spec_path, check_points=False)
    runs, _ = collect_runs(runs_root, spec)
    rows = []
    for test in report_tests(spec):
        if test["kind"] != "paired":
            continue
        metric = test.get("metric", "steps_to_learn")
        for name, seeds in seed_sets(spec):
            verdict = check_paired(spec, [r for r in runs if r.point["seed"] in seeds], test)
            for c in verdict.comparisons:
                if len(c.diffs) < 2:
                    continue
                cov = [
                    st.hodges_lehmann_coverage(c.diffs, conf, estimand)
                    for conf, estimand in ((0.95, "mean"), (0.95, "pseudo-median"), (0.90, "mean"))
                ]
                label = f"{test['treatment'][0]} − {test['control']}, {metric}"
                rows.append(
                    f"| {spec_path.stem} | {label} | {name} | {c.n_pairs} | {sum(d == 0 for d in c.diffs)} | "
                    + " | ".join(f"{v:.0%}" for v in cov)
                    + " |"
                )
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweeps.reporting.coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="claim specs whose committed runs to read")
    parser.add_argument("--runs", default=str(REAL_CPU_RESULTS / "runs"), help="their run folders")
    args = parser.parse_args(argv)
    print("\n".join(HEAD + [row for p in args.specs for row in coverage_rows(Path(p), Path(args.runs))]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
