"""MLflow logging for runs: params from the config object, per-step metrics buffered and written
with `MlflowClient.log_batch`, summary metrics and artifacts at the end, and a terminal status
(FINISHED, FAILED with the error as a tag, KILLED). Runs nest under a parent by its run id, so
child runs created in separate worker processes attach to one sweep run."""

from __future__ import annotations

import logging
import math
import os
import queue
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Optional

from grpo_core.util import defaults
from grpo_core.config.schema import TRACKING_SCHEMES
from grpo_core.util.errors import cause_line, ended_record, interrupts_deferred, mask_secrets, release_frames
from grpo_core.util.files import check_sqlite_writable
from grpo_core.record.provenance import owner_alive, owner_id
from grpo_core.record.run_metrics import CENSORED, censored_at

_BATCH_LIMIT = 1000  # MLflow's per-request metric limit
_WRITER_SWITCH_S = 0.0005  # the interpreter's switch interval while the writer thread writes
# a pruned run (a search's pruner stopped it) is KILLED, MLflow's nearest state; its tag status says pruned
_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED", "pruned": "KILLED", "abandoned": "KILLED"}


class _StoreErrorTraceback(logging.Filter):
    """MLflow logs a traceback for each database error of its SQL store (a SQLite file another
    process holds locked, a damaged table) before it raises the error on: grpo says in one line what
    the error cost (a record incomplete, `grpo recover` completes it), so the traceback is dropped,
    unless MLflow's own log lines were asked for (--verbose, MLFLOW_LOGGING_LEVEL=INFO or DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error")


_STORE_ERRORS = _StoreErrorTraceback()


class _InterruptTraceback(logging.Filter):
    """SQLAlchemy's connection pool logs a traceback when Ctrl-C or SIGTERM lands while it closes or
    resets a connection ("Exception closing connection …"), then raises the interrupt on, and grpo
    records the run as killed and says so in one line: that traceback is dropped. The pool's other
    errors are kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        return not (isinstance(kind, type) and issubclass(kind, KeyboardInterrupt))


_INTERRUPTS = _InterruptTraceback()


def _store_loggers() -> list[tuple[logging.Logger, logging.Filter]]:
    """The loggers whose tracebacks grpo says in one line instead, each with its filter: MLflow's
    SQL store, and SQLAlchemy's pools (each pool class logs under its own qualified name)."""
    from sqlalchemy.pool import Pool

    pools, todo = set(), [Pool]
    while todo:
        cls = todo.pop()
        pools.add(cls)
        todo.extend(cls.__subclasses__())
    return [(logging.getLogger("mlflow.store.db.utils"), _STORE_ERRORS),
            *((logging.getLogger(f"{cls.__module__}.{cls.__name__}"), _INTERRUPTS) for cls in pools)]


def make_client(tracking_uri: str):
    """An MlflowClient on an explicit store (never the ambient MLFLOW_TRACKING_URI). A relative
    SQLite path (the default store) is made absolute first: MLflow keeps one store per URI for the
    life of the process, so the same relative URI from another working folder would otherwise
    still write to the first folder's database."""
    from mlflow.tracking import MlflowClient

    verbose = os.environ.get("MLFLOW_LOGGING_LEVEL", "").upper() in ("INFO", "DEBUG")
    for log, dropped in _store_loggers():
        if verbose:
            log.removeFilter(dropped)
        else:
            log.addFilter(dropped)  # (once: a filter already there is not added again)
    if tracking_uri.startswith("sqlite:///"):
        path = Path(tracking_uri[len("sqlite:///"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.stat().st_size == 0:
            _create_sqlite_store(path)
        if not path.is_absolute() and "?" not in tracking_uri:
            tracking_uri = f"sqlite:///{path.absolute()}"
        return WholeCallClient(MlflowClient(tracking_uri=tracking_uri))
    return MlflowClient(tracking_uri=tracking_uri)


class WholeCallClient:
    """An MlflowClient on a SQLite store whose calls each run whole: SIGTERM or Ctrl-C that comes
    during a call is raised when the call returns (interrupts_deferred), never inside SQLAlchemy.
    There, at the start of a transaction's commit, it became an AssertionError in SQLAlchemy's error
    handling that MLflow raised as MlflowException: the interrupt was lost and a killed trial would
    be recorded as failed (tests/test_faults.py sends it there). benchmarks/interrupted_store.py, 1000
    SIGTERMs at random moments of a loop of reads and writes: with MLflow's own client SQLAlchemy
    logged 70 errors of a signal inside it (cursors it could not close), none with this one. A killed
    search's trial recorded as failed with "database is locked" (a fresh-clone CI run of 2026-11-30)
    is the likely result of such an interrupt in a worker; that lock was not reproduced here. A call
    that waits for SQLite's lock gives up after its busy timeout (20 s), which bounds how long an
    interrupt waits. Only SQLite: a tracking server's requests retry for minutes, and Ctrl-C must
    stop them."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def whole(*args, **kwargs):
            with interrupts_deferred():
                return attr(*args, **kwargs)
        whole.__name__ = whole.__qualname__ = name
        whole.__doc__ = attr.__doc__
        return whole


def kept_whole(client):
    """A block in which a run is made and its id kept: on a SQLite store (a WholeCallClient), Ctrl-C
    and SIGTERM that come during it are raised when it ends (interrupts_deferred), once the caller
    holds the id and can end the run, rather than leave it RUNNING until `grpo recover`. For a
    tracking server, nothing: its requests retry for minutes, and Ctrl-C must stop them."""
    return interrupts_deferred() if isinstance(client, WholeCallClient) else nullcontext()


def _create_sqlite_store(path: Path) -> None:
    """MLflow creates its tables in place, statement by statement: a process stopped meanwhile
    (ctrl-C in the first seconds of a first sweep) leaves a database that every later open fails
    on ("table logged_models already exists"). So a new store is built in a temporary file beside
    it and linked into place in one step; a link never replaces, so a store that another process
    made first wins. The temporary file starts as a copy of the empty store of _store_template,
    so MLflow only adds its Default experiment (with this store's artifact root)."""
    import os
    import shutil
    import tempfile

    from mlflow.tracking import MlflowClient

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".creating")
    os.close(fd)
    try:
        template = _store_template()
        if template is not None:
            shutil.copyfile(template, tmp)
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)  # the rest, if any
        if path.is_file() and path.stat().st_size == 0:  # an empty file is no store yet
            path.unlink()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def _store_template() -> Optional[Path]:
    """An MLflow SQLite store with every table and no experiment, made once per MLflow version and
    user (~/.cache/grpo-lab): MLflow's migrations are most of what a new store costs, a copy of this
    file almost nothing (measured in results/benchmarks/README.md). None when it cannot be made here
    (then MLflow migrates the new store itself). Per user, not in /tmp: a store is never a copy of a file another user wrote."""
    import os
    import tempfile

    import mlflow
    import sqlalchemy

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grpo-lab"
    template = cache / f"mlflow-{mlflow.__version__}-empty.db"
    if template.is_file():
        return template
    tmp = None
    try:
        from mlflow.store.db.utils import _initialize_tables  # what MLflow runs on an empty database

        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{template.name}.", suffix=".creating")
        os.close(fd)
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        try:
            os.link(tmp, template)
        except FileExistsError:
            pass
        return template
    except Exception:  # a read-only home, a full disk, another MLflow: the slow path still works
        return None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def check_tracking_uri(uri: str, *, flag: str = "--tracking-uri", must_exist: bool = False) -> None:
    """A one-line UserInputError unless `uri` is an MLflow store this project can use: a SQLite
    file (whose folder exists; the file too with must_exist), a file: store, or a reachable server."""
    import urllib.error
    import urllib.request

    from grpo_core.util.errors import UserInputError, remember_secrets

    remember_secrets(uri)
    allowed = "allowed: sqlite:///path.db, file:/path, http(s)://host:port"
    if not isinstance(uri, str) or not uri.startswith(TRACKING_SCHEMES):
        raise UserInputError(f"{flag} {uri!r}: unknown tracking store; {allowed}")
    if uri.startswith(("http://", "https://")):
        import base64
        from urllib.parse import unquote, urlsplit, urlunsplit

        parts = urlsplit(uri)
        request = urllib.request.Request(urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1])).rstrip("/")
                                         + "/health")
        if parts.username is not None:  # user:password@ in the address: HTTP basic authentication, as MLflow sends it
            token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                resp.read()
        except Exception as exc:  # unreachable, refused, or an address urllib cannot parse
            raise UserInputError(f"{flag} {mask_secrets(uri)!r}: MLflow server not reachable: "
                                 f"{mask_secrets(str(getattr(exc, 'reason', exc)))}") from None
    elif uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if must_exist and not path.is_file():
            raise UserInputError(f"{flag} {uri!r}: no such MLflow database {path}")
        if not must_exist and not path.parent.exists() and uri != defaults.TRACKING_URI:
            raise UserInputError(f"{flag} {uri!r}: folder {path.parent} does not exist")
        check_sqlite_writable(path, f"{flag} {uri!r}")


def _store_elsewhere(tracking_uri: str) -> Optional[Path]:
    """The folder of a SQLite store other than the default one, or None (the default store, a server)."""
    if tracking_uri.startswith("sqlite:///") and tracking_uri != defaults.TRACKING_URI:
        return Path(tracking_uri[len("sqlite:///"):]).resolve().parent
    return None


def artifact_root_for(tracking_uri: str) -> Optional[str]:
    """Explicit artifact location for local stores: the default store's results/local/mlartifacts, and
    for another SQLite file the folder mlartifacts beside it (a store given elsewhere keeps its
    artifacts there too, not in the working folder); a tracking server chooses its own."""
    if tracking_uri.startswith(("http://", "https://")):
        return None
    if (folder := _store_elsewhere(tracking_uri)) is not None:
        return (folder / "mlartifacts").as_uri()
    return Path(defaults.ARTIFACT_ROOT).resolve().as_uri()


def cache_dir_for(tracking_uri: str) -> Optional[str]:
    """Where a sweep that leaves cache_dir at its default keeps its cache (tiny bases, measured
    baselines): the folder `cache` beside a SQLite store given elsewhere, as its artifacts are, so
    that a sweep whose places are all given writes nothing into the working folder; None (the
    default, results/local/cache) for the default store and a tracking server."""
    folder = _store_elsewhere(tracking_uri)
    return None if folder is None else str(folder / "cache")


# Without this tag MLflow 3's UI opens an experiment in its GenAI view (traces, an assistant)
# and hides the params and metrics columns of the runs list.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def get_or_create_experiment(client, name: str, tracking_uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=artifact_root_for(tracking_uri),
                                            tags=EXPERIMENT_KIND)
        except Exception:  # created by a parallel worker in the meantime
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.tags.get("mlflow.experimentKind") != EXPERIMENT_KIND["mlflow.experimentKind"]:
        for key, value in EXPERIMENT_KIND.items():  # experiments made before the tag existed
            client.set_experiment_tag(exp.experiment_id, key, value)
    return exp.experiment_id


def ui_command(tracking_uri: str, port: int) -> list[str]:
    """`mlflow ui` on the given store, bound to loopback, with the store's artifact root."""
    import shutil
    import sys

    make_client(tracking_uri)  # creates the sqlite folder so the UI starts on a fresh clone
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    return [mlflow, "ui", "--backend-store-uri", tracking_uri, "--default-artifact-root",
            artifact_root_for(tracking_uri) or Path(defaults.ARTIFACT_ROOT).resolve().as_uri(), "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1"]  # one user on this machine: one worker starts in seconds, four in ~20 s on 2 cores


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def log_metrics(client, run_id: str, metrics: list) -> None:
    """MLflow Metric entities with the public log_batch, in requests of at most _BATCH_LIMIT."""
    for i in range(0, len(metrics), _BATCH_LIMIT):
        client.log_batch(run_id, metrics=metrics[i:i + _BATCH_LIMIT])


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

    return [Metric(k, float(v), ts, int(r["step"])) for r in rows for k, v in r.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _param_value(v) -> str:
    return mask_secrets(str(v))[:6000]  # a password in a URL is never logged


class MlflowRunLogger:
    """Mirrors one run into MLflow. The training loop only appends plain (key, value, step, ts)
    tuples; every `flush_every` steps or `flush_seconds` the buffer goes to a writer thread that
    builds the MLflow entities and writes them with the public log_batch, so the step does not
    wait for the database. (A writer process would keep MLflow's ~0.1 ms of Python per point off
    the training process's GIL, but costs each process ~6 s of CPU to start MLflow again.)"""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str, params: dict,
                 tags: Optional[dict] = None, parent_run_id: Optional[str] = None, flush_every: int = 50,
                 flush_seconds: float = 2.0, run_dir: Optional[str | Path] = None, writer: str = "thread"):
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
                run = self.client.create_run(self.experiment_id, run_name=run_name,
                                             tags={k: str(v) for k, v in all_tags.items()})
                self.run_id = run.info.run_id
            self._writer.name = f"mlflow-writer-{self.run_id[:8]}"
            for i in range(0, len(params_list), 100):  # MLflow's per-request param limit
                self.client.log_batch(self.run_id, params=params_list[i:i + 100])
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
            self._pending.append(self.client.log_batch(self.run_id, metrics=metrics[i:i + _BATCH_LIMIT],
                                                       synchronous=False))

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


def record_end(client, run_id: str, summary: dict, status: str, max_steps: Optional[int],
               run_dir: Optional[str | Path]) -> None:
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
    metrics = [Metric(k, float(v), ts, 0) for k, v in values.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))]
    if metrics:
        client.log_batch(run_id, metrics=metrics)
    tags = [RunTag("status", status)]
    tags += [RunTag(k, v[:5000]) for k, v in summary.items() if isinstance(v, str) and k not in ("status", "error", "traceback")]
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


# ---- runs whose process died without recording it ---------------------------------------------------
def backfill_and_end(client, run_id: str, run_dir: Optional[str | Path], reason: str) -> tuple[int, str]:
    """End a run that its process left RUNNING (killed with SIGKILL, or its store failed at the end).
    Its folder holds what the process wrote: the steps MLflow does not have yet are logged from its
    metrics.jsonl; a summary.json that says finished ends the run FINISHED with its summary; else the
    run is KILLED with the reason (and summary.json, when missing, says killed). A folder that another
    run has taken over since (a resume from a checkpoint) is left alone: its steps are that run's.
    A file that cannot be written is named in the reason; nothing stops the recovery. Returns (how
    many steps were backfilled, FINISHED or KILLED)."""
    import json

    import yaml
    from mlflow.entities import RunTag

    from grpo_core.run import RUN_MARKER, mark_killed, read_metrics_skipping

    backfilled, notes = 0, []
    folder = Path(run_dir) if run_dir else None
    marker = folder / RUN_MARKER if folder is not None else None
    owner = marker.read_text().strip() if marker is not None and marker.is_file() else run_id
    if folder is not None and owner != run_id:  # resumed by another run since: its files are that run's
        reason += f"; its run folder {folder} was since taken over by MLflow run {owner} (a resume)"
        folder = None
    summary = {}
    if folder is not None and (folder / "summary.json").is_file():
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
    if folder is not None and (folder / "metrics.jsonl").is_file():
        have = max((m.step for m in client.get_metric_history(run_id, "reward")), default=0)
        rows, bad = read_metrics_skipping(folder / "metrics.jsonl")
        if bad:  # a disk or an editor damaged a line: the others are still the run's curves
            notes.append(f"{bad} malformed line(s) of metrics.jsonl skipped")
        rows = [r for r in rows if r.get("step", 0) > have]
        log_metrics(client, run_id, step_points(rows, int(time.time() * 1000)))
        backfilled = len(rows)
    if summary.get("status") == "finished":  # it trained to the end; only its MLflow record was cut short
        try:
            max_steps = (yaml.safe_load((folder / "config.yaml").read_text()) or {}).get("max_steps")
        except (OSError, ValueError, yaml.YAMLError):
            max_steps = None
        record_end(client, run_id, summary, "finished", max_steps, folder)
        return backfilled, "FINISHED"
    if folder is not None and (note := mark_killed(folder, reason)) is not None:
        notes.append(note)
    if notes:
        reason += "; " + "; ".join(notes)
    client.log_batch(run_id, tags=[RunTag("failure_reason", reason[:5000]), RunTag("error", reason[:5000]),
                                   RunTag("status", "killed")])  # `error`, as a run that records its own end
    if folder is not None:
        for name in ("config.yaml", "metrics.jsonl", "summary.json"):
            if (folder / name).is_file():
                client.log_artifact(run_id, str(folder / name))
    client.set_terminated(run_id, status="KILLED")
    return backfilled, "KILLED"


def recover_runs(tracking_uri: str) -> tuple[list[tuple[str, str, int, str]], list[tuple[str, str]]]:
    """Find RUNNING runs whose owner process is gone from this host (killed with SIGKILL, the
    OOM killer, a store that failed at its end) and end them with backfill_and_end. Returns (ended:
    (run id, name, steps backfilled, FINISHED | KILLED), left alone: (run id, why))."""
    client = make_client(tracking_uri)
    ended, left = [], []
    experiments = [e.experiment_id for e in client.search_experiments()]
    for i in range(0, len(experiments), 100):
        for run in client.search_runs(experiments[i:i + 100], filter_string="attributes.status = 'RUNNING'",
                                      max_results=50_000):
            owner = run.data.tags.get("owner")
            alive = owner_alive(owner) if owner else None
            name = run.info.run_name or run.info.run_id
            if alive is False:
                pid = owner.rsplit(":", 2)[1]
                try:
                    steps, status = backfill_and_end(client, run.info.run_id, run.data.tags.get("run_dir"),
                                                     f"process died (pid {pid} on this host)")
                except Exception as exc:  # one bad folder or run never stops the others' recovery
                    left.append((run.info.run_id, f"{name}: could not be ended: {cause_line(exc)}"))
                    continue
                ended.append((run.info.run_id, name, steps, status))
            elif alive is None:
                left.append((run.info.run_id, f"{name}: owner {owner or 'not recorded'} cannot be checked from this host"))
            else:  # its process is alive: a run in progress, never ended by recover
                left.append((run.info.run_id, f"{name}: still running (pid {owner.rsplit(':', 2)[1]} on this host)"))
    return ended, left
