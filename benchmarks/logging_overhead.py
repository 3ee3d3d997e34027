"""What MLflow logging adds to a training step on the tiny model.

Alternates runs with and without the MLflow logger in one process (so machine drift cancels)
and reports medians over runs of: the median step time, the summed step time, and the time the
training loop spent inside log_step. Usage:

    .venv/bin/python benchmarks/logging_overhead.py [--pairs 4] [--steps 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from grpo_core.config import config_from_dict
from grpo_core.run import run_training
from grpo_core.mlflow_logging import MlflowRunLogger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="grpo-logbench-"))
    uri = f"sqlite:///{tmp}/mlflow.db"
    cfg = config_from_dict({"max_steps": args.steps})
    MlflowRunLogger(uri, "bench", "warm-up", {}).end({}, "finished")  # create the database first
    off_med, on_med, off_sum, on_sum, in_log, writer = [], [], [], [], [], []
    for i in range(args.pairs):
        s = run_training(cfg, tmp / f"off{i}", progress=False)
        off_med.append(s["median_step_time_s"])
        off_sum.append(s["train_time_s"])
        logger = MlflowRunLogger(uri, "bench", f"on{i}", cfg.to_dict())
        s = run_training(cfg, tmp / f"on{i}", logger=logger, progress=False)
        on_med.append(s["median_step_time_s"])
        on_sum.append(s["train_time_s"])
        in_log.append(logger.logging_seconds)
        writer.append(logger.writer_cpu_seconds)
    med = statistics.median
    print(f"tiny model, {args.steps} steps, {args.pairs} interleaved pairs (medians over runs)")
    print(f"median step time   no MLflow {med(off_med) * 1e3:.2f} ms   MLflow {med(on_med) * 1e3:.2f} ms   "
          f"ratio {med(on_med) / med(off_med):.3f}")
    print(f"summed step time   no MLflow {med(off_sum):.2f} s    MLflow {med(on_sum):.2f} s    "
          f"ratio {med(on_sum) / med(off_sum):.3f}")
    print(f"time in log_step   {med(in_log) * 1e3:.1f} ms per run = {med(in_log) / med(on_sum) * 100:.2f}% of step time")
    print(f"writer thread CPU  {med(writer) * 1e3:.1f} ms per run = {med(writer) / med(on_sum) * 100:.2f}% of step time "
          f"(MLflow's public log_batch, on a thread beside the training loop)")


if __name__ == "__main__":
    main()
