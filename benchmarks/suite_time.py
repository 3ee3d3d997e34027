"""How long a suite's committed runs took, per spec, from their run folders (no training). Figures: docs/howto/real-model-cpu.md.

    python -m benchmarks.suite_time                                   # experiments/real/cpu/, results/real/cpu/runs/
    python -m benchmarks.suite_time --experiments DIR --runs DIR --workers 2

For each spec with a run folder: the finished runs, their steps, the sum of their `wall_time_s`
(summary.json), that sum ÷ the workers of `grpo reproduce` (what the spec costs when its runs
share nothing but the machine), the median of the runs' median step times, and the CPUs they ran
on. It is a lower bound on an invocation's wall time (process start-up, the baseline and the
report come on top); the how-to page states the invocations' own times beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from grpo_core.util.errors import UserInputError
from grpo_core.util.yaml_files import read_yaml_mapping
from sweeps.paths import REAL_CPU_EXPERIMENTS, REAL_CPU_RESULTS
from sweeps.reporting.reproduce import claim_specs


def spec_times(spec_path: Path, runs_root: Path, workers: int) -> dict | None:
    """One spec's row, or None when it has no finished run."""
    name = read_yaml_mapping(spec_path)["name"]
    summaries = []
    for path in sorted((runs_root / name).glob("trial-*/summary.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict) and summary.get("status") == "finished":
            summaries.append(summary)
    if not summaries:
        return None
    walls = [float(s.get("wall_time_s", 0.0)) for s in summaries]
    steps = sorted({int(s.get("steps_completed", 0)) for s in summaries})
    medians = [float(s["median_step_time_s"]) for s in summaries if s.get("median_step_time_s") is not None]
    return {
        "spec": spec_path.name,
        "runs": len(summaries),
        "steps": "/".join(map(str, steps)),
        "walls_min": sum(walls) / 60,
        "per_workers_min": sum(walls) / 60 / workers,
        "median_step_s": statistics.median(medians) if medians else float("nan"),
        "cpus": ", ".join(sorted({_short_cpu(str(s.get("device_name", "not recorded"))) for s in summaries})),
    }


def _short_cpu(name: str) -> str:
    for vendor in ("AMD EPYC", "Intel(R) Xeon(R)"):
        if name.startswith(vendor):
            return vendor.replace("(R)", "")
    return name


def table(rows: list[dict], workers: int) -> str:
    lines = [
        f"| spec | runs | steps | run walls summed (min) | ÷ {workers} workers (min) | median step (s) | CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['spec']}` | {r['runs']} | {r['steps']} | {r['walls_min']:.1f} | {r['per_workers_min']:.1f} "
            f"| {r['median_step_s']:.1f} | {r['cpus']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", default=str(REAL_CPU_EXPERIMENTS), help="the spec folder")
    parser.add_argument("--runs", default=str(REAL_CPU_RESULTS / "runs"), help="the runs root (one folder per sweep)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the invocation (default 2)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        print(f"suite_time: --workers {args.workers}; allowed: an integer ≥ 1", file=sys.stderr)
        return 2
    if not Path(args.experiments).is_dir():
        print(
            f"suite_time: --experiments {args.experiments}: no such folder; allowed: a folder of specs", file=sys.stderr
        )
        return 2
    try:
        specs = claim_specs(Path(args.experiments))
    except UserInputError as exc:
        print(f"suite_time: {exc}", file=sys.stderr)
        return 2
    rows = [r for p in specs if (r := spec_times(p, Path(args.runs), args.workers))]
    print(table(rows, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
