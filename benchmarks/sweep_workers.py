"""Sweep throughput: the same grid with `--workers 1` and `--workers 2`, alternating. Figures: docs/development/measurements.md and results/benchmarks/README.md.

Each repetition runs the grid from scratch (fresh Optuna and MLflow stores in a temporary
folder) once with one worker and once with two, as real `grpo sweep` processes. Reports the
medians over repetitions of: the command's wall time, the sweep's own wall time (from the
first trial claimed to the last trial told, as `grpo sweep` prints it), the trials' median
step time, and the ratios workers=2 / workers=1. Usage:

    .venv/bin/python benchmarks/sweep_workers.py [--spec experiments/example-grid.yaml] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(spec: str, workers: int, folder: Path) -> dict:
    folder.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "grpo_lab",
        "sweep",
        spec,
        "--workers",
        str(workers),
        "--storage",
        f"sqlite:///{folder}/optuna.db",
        "--tracking-uri",
        f"sqlite:///{folder}/mlflow.db",
        "--out-root",
        str(folder / "runs"),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    command_wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"grpo sweep failed:\n{proc.stderr[-3000:]}")
    sweep_wall = float(re.search(r"worker\(s\), ([\d.]+)s wall", proc.stdout).group(1))
    steps = [json.loads(p.read_text())["median_step_time_s"] for p in (folder / "runs").rglob("summary.json")]
    return {
        "command_wall": command_wall,
        "sweep_wall": sweep_wall,
        "trials": len(steps),
        "median_step_ms": 1000 * statistics.median(steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="experiments/example-grid.yaml")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    results = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="grpo-sweepbench-") as tmp:
        for rep in range(args.reps):
            for workers in (1, 2):
                r = run_once(args.spec, workers, Path(tmp) / f"w{workers}-{rep}")
                results[workers].append(r)
                print(
                    f"rep {rep} workers={workers}: command {r['command_wall']:.1f} s, sweep {r['sweep_wall']:.1f} s, "
                    f"{r['trials']} trials, median step {r['median_step_ms']:.1f} ms",
                    flush=True,
                )
    med = {
        w: {k: statistics.median(r[k] for r in rs) for k in ("command_wall", "sweep_wall", "median_step_ms")}
        for w, rs in results.items()
    }
    print(f"\nspec {args.spec}, {os.cpu_count()} cores, {args.reps} repetitions (medians)")
    print("| | workers=1 | workers=2 | ratio 2/1 |\n|---|---|---|---|")
    for key, label in (
        ("command_wall", "command wall time (s)"),
        ("sweep_wall", "sweep wall time (s)"),
        ("median_step_ms", "median step time (ms)"),
    ):
        print(f"| {label} | {med[1][key]:.1f} | {med[2][key]:.1f} | **{med[2][key] / med[1][key]:.2f}** |")
    print(
        f"| bound: (step time at 1 thread, 2 at once) / 2 / (step time at 2 threads) | | | "
        f"{med[2]['median_step_ms'] / 2 / med[1]['median_step_ms']:.2f} |"
    )


if __name__ == "__main__":
    main()
