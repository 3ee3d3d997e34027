"""What a command pays before it trains: a new MLflow SQLite store (MLflow's own migrations against
a copy of grpo-lab's empty template, grpo_core/mlflow_store.py) and an MLflow server until it
answers /health (with MLflow's job runner, its default, and without, as `grpo ui` starts it).
Medians over --reps, each in fresh files; the server on a free loopback port. Usage: Figures: results/benchmarks/README.md.

    .venv/bin/python benchmarks/startup.py --reps 5 [--server-reps 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def new_store_s(folder: Path, template: bool) -> float:
    """Seconds to a usable new store, in a child process with MLflow already imported."""
    code = (
        "import time\n"
        "from mlflow.tracking import MlflowClient\n"
        "from grpo_core.mlflow_store import make_client\n"
        "t = time.perf_counter()\n"
        f"uri = 'sqlite:///{folder}/m.db'\n"
        + (
            "make_client(uri).search_experiments()\n"
            if template
            else "MlflowClient(tracking_uri=uri).search_experiments()\n"
        )
        + "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "MLFLOW_LOGGING_LEVEL": "WARNING"},
    )
    return float(out.stdout.strip().splitlines()[-1])


def server_s(folder: Path, job_runner: bool) -> float:
    from grpo_core.mlflow_store import make_client

    make_client(f"sqlite:///{folder}/m.db")  # the store exists, as it does for `grpo ui` after a sweep
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true" if job_runner else "false"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{folder}/m.db",
            "--workers",
            "1",
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    return time.perf_counter() - started
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("mlflow server exited") from None
                time.sleep(0.1)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--server-reps", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        from grpo_core.mlflow_store import _store_template

        _store_template()  # made once per MLflow version and user: not what a new store costs
        # (label, fn, reps, (before, its argument), (after, its argument))
        cases = (
            ("new SQLite store", new_store_s, args.reps, ("MLflow's migrations", False), ("template copy", True)),
            (
                "mlflow server to /health",
                server_s,
                args.server_reps,
                ("job runner on", True),
                ("job runner off", False),
            ),
        )
        for name, fn, reps, *variants in cases:
            times = {label: [] for label, _ in variants}
            for rep in range(reps):
                for i, (label, arg) in enumerate(variants):  # alternating, fresh files each time
                    folder = Path(tmp) / f"{name[:3]}-{rep}-{i}"
                    folder.mkdir()
                    times[label].append(fn(folder, arg))
            (before, _), (after, _) = variants
            a, b = statistics.median(times[before]), statistics.median(times[after])
            rows.append(f"| {name} | {before} {a:.2f} s | {after} {b:.2f} s | {b / a:.2f} | {reps} |")
    print("| what | before | after | after/before | reps |\n|---|---|---|---|---|\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
