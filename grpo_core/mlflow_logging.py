"""MLflow logging for runs: params from the config object, per-step metrics buffered and written
by a writer thread with `MlflowClient.log_batch`, summary metrics and artifacts at the end, and a
terminal status (FINISHED, FAILED with the error as a tag, KILLED). Runs nest under a parent by its
run id, so child runs created in separate worker processes attach to one sweep run. The store (its
client, checks, experiments, the UI's command) is mlflow_store.py; ending the runs a dead process
left RUNNING is mlflow_recovery.py."""

from __future__ import annotations

import math
import os
import queue
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Optional

from grpo_core.util.errors import ended_record, mask_secrets, release_frames
from grpo_core.record.provenance import owner_id
from grpo_core.record.run_metrics import CENSORED, censored_at
from grpo_core.mlflow_store import get_or_create_experiment, kept_whole, make_client

_BATCH_LIMIT = 1000  # MLflow's per-request metric limit
_WRITER_SWITCH_S = 0.0005  # the interpreter's switch interval while the writer thread writes
# a pruned run (a search's pruner stopped it) is KILLED, MLflow's nearest state; its tag status says pruned
_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED", "pruned": "KILLED", "abandoned": "KILLED"}


def git_commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                cwd=Path(__file__).resolve().parent,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def log_metrics(client, run_id: str, metrics: list) -> None:
    """MLflow Metric entities with the public log_batch, in requests of at most _BATCH_LIMIT."""
    for i in range(0, len(metrics), _BATCH_LIMIT):
        client.log_batch(run_id, metrics=metrics[i : i + _BATCH_LIMIT])


_switch_lock = threading.Lock()
_switch_writers = 0  # writer threads inside short_switch_interval now
_switch_saved = 0.005


@contextmanager
def short_switch_interval():
    """While a writer thread writes (pure Python, ~80 µs per point), the training thread waits for
    the interpreter lock between its torch ops for up to the switch interval (5 ms): shorter while
    any writer writes, so the loop gets it back within 0.5 ms. Counted, so that two loggers writing
    at once (a search trial and its seed run) restore the interval the first one found."""
    global _switch_writers, _switch_saved
    with _switch_lock:
        if _switch_writers == 0:
            _switch_saved = sys.getswitchinterval()
            sys.setswitchinterval(_WRITER_SWITCH_S)
        _switch_writers += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_writers -= 1
            if _switch_writers == 0:
                sys.setswitchinterval(_switch_saved)


def _reset_switch_interval_in_child() -> None:
    # a worker forked while a writer thread of the parent was writing: that thread does not exist
    # in the child, so its lock, count and short interval must not either
    global _switch_lock, _switch_writers
    if _switch_writers:
        sys.setswitchinterval(_switch_saved)
    _switch_lock, _switch_writers = threading.Lock(), 0


os.register_at_fork(after_in_child=_reset_switch_interval_in_child)


def step_points(rows: list[dict], ts: int) -> list:
    """MLflow Metric entities for metrics.jsonl rows: every finite number but the step, at `ts`."""
    from mlflow.entities import Metric

    return [
        Metric(k, float(v), ts, int(r["step"]))
        for r in rows
        for k, v in r.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]


def _param_value(v) -> str:
    return mask_secrets(str(v))[:6000]  # a password in a URL is never logged


class MlflowRunLogger:
    """Mirrors one run into MLflow. The training loop only appends plain (key, value, step, ts)
    tuples; every `flush_every` steps or `flush_seconds` the buffer goes to a writer thread that
    builds the MLflow entities and writes them with the public log_batch, so the step does not
    wait for the database. (A writer process would keep MLflow's ~0.1 ms of Python per point off
    the training process's GIL, but costs each process ~6 s of CPU to start MLflow again.)"""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        params: dict,
        tags: Optional[dict] = None,
        parent_run_id: Optional[str] = None,
        flush_every: int = 50,
        flush_seconds: float = 2.0,
        run_dir: Optional[str | Path] = None,
        writer: str = "thread",
    ):
        from mlflow.entities import Param

        self.client = make_client(tracking_uri)
        self.experiment_id = get_or_create_experiment(self.client, experiment, tracking_uri)
        self.max_steps = params.get("max_steps")
        # owner and run_dir: `grpo recover` ends the run as KILLED and backfills its curves if this
        # process dies without recording it (SIGKILL, the OOM killer)
        all_tags = {"git_commit": git_commit(), "owner": owner_id(), **(tags or {})}
        if run_dir is not None:
            all_tags["run_dir"] = str(Path(run_dir).resolve())
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        self.run_id: Optional[str] = None
        self.flush_every, self.flush_seconds = flush_every, flush_seconds
        self._last_flush = time.monotonic()
        self.ended = False
        self.logging_seconds = 0.0  # time the training loop spent in log_step: what logging adds to a step
        self.writer_cpu_seconds = 0.0  # CPU time of the writer thread (MLflow's log_batch)
        self._buffer: list[tuple] = []
        self._queue: queue.Queue = queue.Queue()
        self._writer_error: Optional[BaseException] = None
        self.writer = writer  # "thread": ours (below); "mlflow": MLflow's asynchronous log_batch
        self._pending: list = []  # MLflow's RunOperations of the batches handed to it
        self._writer = threading.Thread(target=self._write_loop, name="mlflow-writer", daemon=True)
        if writer == "thread":
            self._writer.start()  # (it waits for rows; none come before the run exists)
        from grpo_core.util.distributed import world_size

        params = {"num_processes": world_size(), **params}  # a data-parallel run says on how many processes
        params_list = [Param(k, _param_value(v)) for k, v in sorted(params.items())]
        try:
            with kept_whole(self.client):  # an interrupt here is raised once the id is kept: the run is ended below
                run = self.client.create_run(
                    self.experiment_id, run_name=run_name, tags={k: str(v) for k, v in all_tags.items()}
                )
                self.run_id = run.info.run_id
            self._writer.name = f"mlflow-writer-{self.run_id[:8]}"
            for i in range(0, len(params_list), 100):  # MLflow's per-request param limit
                self.client.log_batch(self.run_id, params=params_list[i : i + 100])
        except BaseException as exc:  # Ctrl-C, SIGTERM or a store error once the run exists: it is ended, not left
            release_frames(exc)  # running (what `grpo recover` would find only later)
            with suppress(Exception):
                if self.run_id is None:  # no run: the writer is stopped
                    self._queue.put(None)
                else:
                    self.end(*ended_record(exc), None)
            raise

    def log_step(self, metrics: dict) -> None:
        t0 = time.perf_counter()
        step = int(metrics["step"])
        ts = int(time.time() * 1000)
        append = self._buffer.append
        for key, value in metrics.items():
            if key != "step" and value is not None and math.isfinite(value):
                append((key, float(value), step, ts))
        now = time.monotonic()
        if step % self.flush_every == 0 or now - self._last_flush >= self.flush_seconds:
            if self.writer == "thread":
                self._queue.put(self._buffer)  # curves reach MLflow every few seconds, and at most every 50 steps
            else:
                self._hand_to_mlflow(self._buffer)
            self._buffer, self._last_flush = [], now
        self.logging_seconds += time.perf_counter() - t0

    def _hand_to_mlflow(self, rows: list[tuple]) -> None:
        """MLflow's own asynchronous logging: log_batch(synchronous=False) queues the batch for MLflow's
        writer thread and returns at once."""
        from mlflow.entities import Metric

        metrics = [Metric(k, v, ts, step) for k, v, step, ts in rows]
        for i in range(0, len(metrics), _BATCH_LIMIT):
            self._pending.append(
                self.client.log_batch(self.run_id, metrics=metrics[i : i + _BATCH_LIMIT], synchronous=False)
            )

    def _write_loop(self) -> None:
        from mlflow.entities import Metric

        while (rows := self._queue.get()) is not None:
            if self._writer_error is not None or not rows:
                continue  # keep draining so end() never blocks
            t0 = time.thread_time()
            try:
                with short_switch_interval():
                    log_metrics(self.client, self.run_id, [Metric(k, v, ts, step) for k, v, step, ts in rows])
            except BaseException as exc:  # surfaced by end()
                self._writer_error = exc
            self.writer_cpu_seconds += time.thread_time() - t0

    def flush(self) -> None:
        """Write everything buffered so far and wait for the writer."""
        if self.writer != "thread":
            if self._buffer:
                self._hand_to_mlflow(self._buffer)
            self._buffer, pending, self._pending = [], self._pending, []
            for operation in pending:  # raises what MLflow's writer met
                operation.wait()
            return
        self._queue.put(self._buffer)
        self._buffer = []
        self._queue.put(None)
        self._writer.join()
        if self._writer_error is not None:
            raise self._writer_error

    def end(self, summary: dict, status: str, run_dir: Optional[Path] = None) -> None:
        self.ended = True
        try:
            self.flush()
        finally:
            summary = dict(summary)
            if summary.get("train_time_s"):
                # what logging added to the training loop, as a fraction of the summed step time
                summary["logging/overhead_frac"] = self.logging_seconds / summary["train_time_s"]
            record_end(self.client, self.run_id, summary, status, self.max_steps, run_dir)


def record_end(
    client, run_id: str, summary: dict, status: str, max_steps: Optional[int], run_dir: Optional[str | Path]
) -> None:
    """A run's summary metrics (a censored one, never reached, as max_steps + 1: documented, so the key
    always exists), its string fields as tags (provenance: base checksum, device), the error, the run
    folder's files as artifacts, and the terminal status."""
    from mlflow.entities import Metric, RunTag

    ts = int(time.time() * 1000)
    values = dict(summary)
    if max_steps is not None:
        for key in CENSORED:
            if key in values and values[key] is None:
                values[key] = censored_at(key, values, max_steps) + 1
    metrics = [
        Metric(k, float(v), ts, 0)
        for k, v in values.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
    ]
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    tags = [RunTag("status", status)]
    tags += [
        RunTag(k, v[:5000])
        for k, v in summary.items()
        if isinstance(v, str) and k not in ("status", "error", "traceback")
    ]
    if summary.get("error"):
        tags.append(RunTag("error", str(summary["error"])[:5000]))
    client.log_batch(run_id, tags=tags)
    if run_dir is not None:
        for name in ("config.yaml", "metrics.jsonl", "summary.json", "completions.jsonl"):
            if (Path(run_dir) / name).is_file():
                client.log_artifact(run_id, str(Path(run_dir) / name))
        log_completions_table(client, run_id, Path(run_dir) / "completions.jsonl")
    client.set_terminated(run_id, status=_STATUS.get(status, "FAILED"))


def log_completions_table(client, run_id: str, path: Path) -> None:
    """completions.jsonl as an MLflow table (artifact `completions.json`: the run page's artifact
    view shows it as a table; one column per field, one `rewards/<name>` column per reward function)."""
    from grpo_core.run import read_metrics_lenient

    rows = read_metrics_lenient(path) if path.is_file() else []
    if not rows:
        return
    per_function = sorted({key for row in rows for key in row if key.startswith("rewards/")})
    columns = ["step", "prompt", "completion", "reward", *per_function, "advantage", "length", "truncated"]
    client.log_table(run_id, data={c: [row.get(c) for row in rows] for c in columns}, artifact_file="completions.json")
