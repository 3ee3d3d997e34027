"""Several runs sharing one GPU: step time per run and total throughput for N = 1, 2, 4, 8
sweep workers on the real-model experiment. Figures: results/benchmarks/gpu_workers_early.md and results/benchmarks/README.md.

For each N, a copy of the spec (default: experiments/smollm2_arith_warmup.yaml) with N seeds of
one grid point and `--steps` steps runs as `grpo sweep --workers N` on fresh stores; every
worker gets the one GPU. Reports the median step time of each run (steps after the first two),
the sweep's wall time, and throughput = N × steps / wall. Start CUDA MPS first to let the
workers' kernels share the GPU concurrently (`nvidia-cuda-mps-control -d`; stop it with
`echo quit | nvidia-cuda-mps-control`) and compare. Usage:

    .venv/bin/python benchmarks/gpu_workers.py --workers 1 2 4 8 --steps 8 [--spec SPEC] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def share_spec(spec_path: Path, n: int, steps: int) -> dict:
    """The spec's first grid point with seeds 0..n-1 and no replication set, `steps` steps."""
    spec = yaml.safe_load(spec_path.read_text())
    first = {axis: values[0] for axis, values in (spec.get("grid") or {}).items()}
    spec.update(
        name=f"gpu-share-{n}",
        grid={k: [v] for k, v in first.items()} or {"seed_only": [0]},
        seeds=list(range(n)),
        replication_seeds=[],  # (a spec's own replication seeds may be among 0..n-1)
        base={**spec.get("base", {}), "max_steps": steps, "stl_window": max(1, steps // 2)},
    )
    for key in ("report", "quick"):
        spec.pop(key, None)
    return spec


def run(spec_path: Path, n: int, steps: int, work: Path) -> dict:
    spec = share_spec(spec_path, n, steps)
    path = work / f"share-{n}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_lab",
            "sweep",
            str(path),
            "--workers",
            str(n),
            "--storage",
            f"journal://{work}/optuna-{n}.log",
            "--tracking-uri",
            f"sqlite:///{work}/mlflow-{n}.db",
            "--out-root",
            str(work / "runs"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"N={n}: grpo sweep failed:\n{proc.stderr[-3000:]}")
    medians = []
    for metrics in sorted((work / "runs" / f"gpu-share-{n}").glob("trial-*/metrics.jsonl")):
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        medians.append(statistics.median(r["step_time"] for r in rows[2:] or rows))
    return {"n": n, "step_s": statistics.median(medians), "wall_s": wall, "throughput": n * steps / wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default=str(ROOT / "experiments" / "smollm2_arith_warmup.yaml"))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grpo-gpu-share-") as work:
        rows = [run(Path(args.spec), n, args.steps, Path(work)) for n in args.workers]
    lines = [
        f"Runs sharing one GPU: `{Path(args.spec).name}`, {args.steps} steps per run "
        f"(`benchmarks/gpu_workers.py --workers {' '.join(map(str, args.workers))} --steps {args.steps}`)",
        "",
        "| workers | median step time per run (s) | sweep wall (s) | steps per second, all runs |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['n']} | {r['step_s']:.2f} | {r['wall_s']:.1f} | {r['throughput']:.2f} |" for r in rows]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
