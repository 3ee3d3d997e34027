"""MLflow logging for runs: params from the config object, per-step metrics buffered and written
with `MlflowClient.log_batch`, summary metrics and artifacts at the end, and a terminal status
(FINISHED, FAILED with the error as a tag, KILLED). Runs nest under a parent by its run id, so
child runs created in separate worker processes attach to one sweep run."""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path
from typing import Optional

DEFAULT_TRACKING_URI = "sqlite:///results/local/mlflow.db"
DEFAULT_ARTIFACT_ROOT = "results/local/mlartifacts"
_BATCH_LIMIT = 1000  # MLflow's per-request metric limit
_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}


def make_client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    if tracking_uri.startswith("sqlite:///"):
        Path(tracking_uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=tracking_uri)


def artifact_root_for(tracking_uri: str) -> Optional[str]:
    """Explicit artifact location for local stores; a tracking server chooses its own."""
    if tracking_uri.startswith(("http://", "https://")):
        return None
    return Path(DEFAULT_ARTIFACT_ROOT).resolve().as_uri()


def get_or_create_experiment(client, name: str, tracking_uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_root_for(tracking_uri))
    except Exception:  # created by a parallel worker in the meantime
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def ui_command(tracking_uri: str, port: int) -> list[str]:
    """`mlflow ui` on the given store, bound to loopback, with the default artifact root."""
    import shutil
    import sys

    make_client(tracking_uri)  # creates the sqlite folder so the UI starts on a fresh clone
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    return [mlflow, "ui", "--backend-store-uri", tracking_uri, "--default-artifact-root",
            Path(DEFAULT_ARTIFACT_ROOT).resolve().as_uri(), "--host", "127.0.0.1", "--port", str(port)]


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _param_value(v) -> str:
    return str(v)[:6000]


class MlflowRunLogger:
    """Mirrors one run into MLflow. `flush_every` steps are buffered per log_batch call."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str, params: dict,
                 tags: Optional[dict] = None, parent_run_id: Optional[str] = None, flush_every: int = 50):
        from mlflow.entities import Param, RunTag

        self.client = make_client(tracking_uri)
        self.experiment_id = get_or_create_experiment(self.client, experiment, tracking_uri)
        all_tags = {"git_commit": git_commit(), **(tags or {})}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={k: str(v) for k, v in all_tags.items()})
        self.run_id = run.info.run_id
        self.flush_every = flush_every
        self.ended = False
        self.logging_seconds = 0.0  # time spent in log_step/flush: the overhead logging adds to a run
        self._buffer: list = []
        params_list = [Param(k, _param_value(v)) for k, v in sorted(params.items())]
        for i in range(0, len(params_list), 100):  # MLflow's per-request param limit
            self.client.log_batch(self.run_id, params=params_list[i:i + 100])
        self._tag_cls = RunTag

    def log_step(self, metrics: dict) -> None:
        from mlflow.entities import Metric

        t0 = time.perf_counter()
        step = int(metrics["step"])
        ts = int(time.time() * 1000)
        for key, value in metrics.items():
            if key == "step" or value is None:
                continue
            value = float(value)
            if math.isfinite(value):
                self._buffer.append(Metric(key, value, ts, step))
        if step % self.flush_every == 0:
            self.flush()
        self.logging_seconds += time.perf_counter() - t0

    def flush(self) -> None:
        while self._buffer:
            chunk, self._buffer = self._buffer[:_BATCH_LIMIT], self._buffer[_BATCH_LIMIT:]
            self.client.log_batch(self.run_id, metrics=chunk)

    def log_summary(self, summary: dict) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        metrics = [Metric(k, float(v), ts, 0) for k, v in summary.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def end(self, summary: dict, status: str, run_dir: Optional[Path] = None) -> None:
        t0 = time.perf_counter()
        self.flush()
        self.logging_seconds += time.perf_counter() - t0
        self.ended = True
        summary = dict(summary)
        if summary.get("train_time_s"):
            # per-step logging cost (buffering + batched writes) as a fraction of the summed step time
            summary["logging/overhead_frac"] = self.logging_seconds / summary["train_time_s"]
        self.log_summary(summary)
        tags = [self._tag_cls("status", status)]
        if summary.get("error"):
            tags.append(self._tag_cls("error", str(summary["error"])[:5000]))
        self.client.log_batch(self.run_id, tags=tags)
        if run_dir is not None:
            for name in ("config.yaml", "metrics.jsonl", "summary.json"):
                if (Path(run_dir) / name).is_file():
                    self.client.log_artifact(self.run_id, str(Path(run_dir) / name))
        self.client.set_terminated(self.run_id, status=_STATUS.get(status, "FAILED"))
