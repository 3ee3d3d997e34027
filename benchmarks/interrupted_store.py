"""What SIGTERM at a random moment of MLflow's SQLite store calls leaves behind, with the client
grpo-lab uses (`make_client`: each call runs whole, the signal raised when it returns) and with
MLflow's own client (the signal raised wherever the interpreter is, often inside SQLAlchemy). Figures: docs/howto/faults.md.

One process loops reads and writes on one run (search_runs, get_run, log_batch, get_metric_history)
while a timer thread sends it SIGTERM after 0-80 ms; the handler raises Terminated, as in every
grpo command. Then it does what a worker does with a killed trial: release_frames, then a write to
the store. Per kill it counts how the loop ended (Terminated, or the error the signal turned into),
whether another connection could take SQLite's write lock within 0.5 s (a lock this process kept),
whether the record's write failed or took over 1 s, and MLflow's logged "Error closing cursor".
Usage:

    .venv/bin/python benchmarks/interrupted_store.py [--kills 1000] [--client whole|mlflow] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import random
import signal
import sqlite3
import tempfile
import threading
import time
from pathlib import Path


class _Count(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = 0

    def emit(self, record):
        self.records += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=1000)
    ap.add_argument("--client", choices=("whole", "mlflow"), default="whole")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from grpo_core.mlflow_store import make_client
    from grpo_core.util.errors import Terminated, handle_sigterm, release_frames

    db = Path(tempfile.mkdtemp()) / "mlflow.db"
    client = make_client(f"sqlite:///{db}")  # (creates the store)
    if args.client == "mlflow":
        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    logged = _Count()
    for name in ("sqlalchemy", "mlflow"):  # every record, whatever make_client's filters let through
        logging.getLogger(name).addHandler(logged)
    experiment = client.create_experiment("interrupted")
    run_id = client.create_run(experiment).info.run_id
    rng = random.Random(args.seed)
    ended: collections.Counter = collections.Counter()
    kept_lock = record_failed = record_slow = 0
    handle_sigterm()
    for kill in range(args.kills):
        timer = threading.Timer(rng.uniform(0.0, 0.08), os.kill, (os.getpid(), signal.SIGTERM))
        try:
            timer.start()
            step = 0
            while True:
                step += 1
                client.search_runs([experiment], max_results=5)
                client.get_run(run_id)
                client.log_batch(run_id, metrics=[Metric("m", 1.0, 0, kill * 100_000 + step)])
                client.get_metric_history(run_id, "m")
        except BaseException as exc:  # Terminated, or what the signal turned into inside the store
            timer.join()
            handle_sigterm()  # (the first SIGTERM set it to be ignored while the record is written)
            ended["Terminated" if isinstance(exc, Terminated) else type(exc).__name__] += 1
            release_frames(exc)
        probe = sqlite3.connect(db, timeout=0.5)
        try:
            probe.execute("BEGIN EXCLUSIVE")
            probe.rollback()
        except sqlite3.OperationalError:
            kept_lock += 1
        finally:
            probe.close()
        t0 = time.monotonic()
        try:
            client.set_tag(run_id, "kill", str(kill))
        except Exception:
            record_failed += 1
        record_slow += time.monotonic() - t0 > 1.0
    print(f"client={args.client} kills={args.kills} seed={args.seed}")
    print(f"  loop ended by: {dict(ended)}")
    print(f"  lock kept after the kill: {kept_lock}; record failed: {record_failed}; record over 1 s: {record_slow}")
    print(f"  records MLflow/SQLAlchemy logged: {logged.records}")


if __name__ == "__main__":
    main()
