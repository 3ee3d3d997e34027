"""What MLflow logging adds to a training step on the tiny model. Figures: docs/development/measurements.md and results/benchmarks/README.md.

Runs pairs of identical training runs in one process, one without and one with the MLflow
logger, alternating which goes first (so machine drift cancels), and reports medians over pairs
of the on/off ratios of: the median step time, the summed step time, and the run's wall time
through the logger's end() (which waits for the writer to finish). Also the time the training
loop spent inside log_step and the writer's CPU time, as fractions of the summed step time.
Last, the floor of any writer that uses MLflow's public log_batch: the thread CPU time of one
flush's worth of points (50 steps of a tiny run) written alone, per point and per step, against
the median step time without MLflow.
`--writer` picks the logger's writer: `mlflow` (MLflow's own asynchronous logging,
log_batch(synchronous=False), the default) or `thread` (a writer thread of ours). The process's
CPU time per run (both threads) is reported too, as an on/off ratio.
Usage:

    .venv/bin/python benchmarks/logging_overhead.py [--pairs 8] [--steps 100] [--writer mlflow|thread]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grpo_core.config.loading import config_from_dict
from grpo_core.mlflow_logging import MlflowRunLogger
from grpo_core.run import run_training


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--writer", choices=("mlflow", "thread"), default="mlflow")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="grpo-logbench-"))
    uri = f"sqlite:///{tmp}/mlflow.db"
    cfg = config_from_dict({"max_steps": args.steps})
    MlflowRunLogger(uri, "bench", "warm-up", {}).end({}, "finished")  # create the database first
    run_training(cfg, tmp / "warm-up", progress=False)  # caches the tiny base and the baseline
    ratios = {"median step": [], "summed step": [], "wall": [], "process CPU": []}
    in_log, writer_cpu, summed_on, offs = [], [], [], []
    for i in range(args.pairs):
        result = {}
        for with_mlflow in (False, True) if i % 2 == 0 else (True, False):
            logger = MlflowRunLogger(uri, "bench", f"on{i}", cfg.to_dict(), writer=args.writer) if with_mlflow else None
            t0, c0 = time.perf_counter(), time.process_time()
            s = run_training(cfg, tmp / f"{'on' if with_mlflow else 'off'}{i}", logger=logger, progress=False)
            result[with_mlflow] = (
                s["median_step_time_s"],
                s["train_time_s"],
                time.perf_counter() - t0,
                time.process_time() - c0,
            )
            if logger is not None:
                in_log.append(logger.logging_seconds)
                writer_cpu.append(logger.writer_cpu_seconds)
                summed_on.append(s["train_time_s"])
        offs.append(result[False][0])
        for j, name in enumerate(ratios):
            ratios[name].append(result[True][j] / result[False][j])
    med = statistics.median
    print(f"tiny model, {args.steps} steps, {args.pairs} pairs (order alternating), writer: {args.writer}")
    for name, values in ratios.items():
        print(
            f"{name:12s} time, MLflow / none: median over pairs {med(values):.3f} "
            f"(pairs: {' '.join(f'{v:.3f}' for v in values)})"
        )
    print(
        f"time in log_step   {med(in_log) * 1e3:.1f} ms per run = "
        f"{med(a / b for a, b in zip(in_log, summed_on)) * 100:.2f}% of summed step time"
    )
    if args.writer == "thread":
        print(
            f"writer CPU         {med(writer_cpu) * 1e3:.1f} ms per run = "
            f"{med(a / b for a, b in zip(writer_cpu, summed_on)) * 100:.2f}% of summed step time "
            f"(MLflow's public log_batch, on a thread beside the training loop)"
        )
    floor_us, points_per_step = public_log_batch_floor(uri, tmp / "off0" / "metrics.jsonl")
    step_off = med(offs)
    print(
        f"public log_batch   {floor_us:.0f} µs CPU per point alone (median of 10 flushes of 50 steps); "
        f"{points_per_step} points per step = {floor_us * points_per_step / 1e3:.2f} ms = "
        f"{floor_us * points_per_step / 1e6 / step_off * 100:.1f}% of the median step without MLflow "
        f"({step_off * 1e3:.1f} ms)"
    )


def public_log_batch_floor(uri: str, metrics_file: Path) -> tuple[float, int]:
    """Median thread-CPU µs per point of MLflow's public log_batch writing the curves of 50 steps
    of `metrics_file` (as one writer flush does) into a fresh run, with nothing else running."""
    from grpo_core.mlflow_store import make_client
    from grpo_core.mlflow_logging import log_metrics, step_points
    from grpo_core.run import read_metrics

    rows = read_metrics(metrics_file)[:50]
    client = make_client(uri)
    run_id = client.create_run(client.get_experiment_by_name("bench").experiment_id).info.run_id
    per_point = []
    for ts in range(10):  # a new timestamp each time: new rows
        batch = step_points(rows, ts)
        t0 = time.thread_time()
        log_metrics(client, run_id, batch)
        per_point.append((time.thread_time() - t0) / len(batch) * 1e6)
    client.set_terminated(run_id)
    return statistics.median(per_point), len(batch) // len(rows)


if __name__ == "__main__":
    main()
