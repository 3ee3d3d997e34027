"""The MLflow store a run logs to: its client (whole calls, quiet store loggers), an empty SQLite store
copied from a template, the tracking URI checked before anything starts, where artifacts go, the
experiments, and the command that serves the UI (mlflow_logging.py writes the runs)."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

from grpo_core.util import defaults
from grpo_core.config.schema import TRACKING_SCHEMES
from grpo_core.util.errors import interrupts_deferred, mask_secrets
from grpo_core.util.files import check_sqlite_writable


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
    return [
        (logging.getLogger("mlflow.store.db.utils"), _STORE_ERRORS),
        *((logging.getLogger(f"{cls.__module__}.{cls.__name__}"), _INTERRUPTS) for cls in pools),
    ]


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
        path = Path(tracking_uri[len("sqlite:///") :])
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
        request = urllib.request.Request(
            urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1])).rstrip("/") + "/health"
        )
        if parts.username is not None:  # user:password@ in the address: HTTP basic authentication, as MLflow sends it
            token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                resp.read()
        except Exception as exc:  # unreachable, refused, or an address urllib cannot parse
            raise UserInputError(
                f"{flag} {mask_secrets(uri)!r}: MLflow server not reachable: "
                f"{mask_secrets(str(getattr(exc, 'reason', exc)))}"
            ) from None
    elif uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///") :])
        if must_exist and not path.is_file():
            raise UserInputError(f"{flag} {uri!r}: no such MLflow database {path}")
        if not must_exist and not path.parent.exists() and uri != defaults.TRACKING_URI:
            raise UserInputError(f"{flag} {uri!r}: folder {path.parent} does not exist")
        check_sqlite_writable(path, f"{flag} {uri!r}")


def _store_elsewhere(tracking_uri: str) -> Optional[Path]:
    """The folder of a SQLite store other than the default one, or None (the default store, a server)."""
    if tracking_uri.startswith("sqlite:///") and tracking_uri != defaults.TRACKING_URI:
        return Path(tracking_uri[len("sqlite:///") :]).resolve().parent
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
            return client.create_experiment(
                name, artifact_location=artifact_root_for(tracking_uri), tags=EXPERIMENT_KIND
            )
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

    make_client(tracking_uri)  # creates the sqlite folder so the UI starts on a fresh clone
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    return [
        mlflow,
        "ui",
        "--backend-store-uri",
        tracking_uri,
        "--default-artifact-root",
        artifact_root_for(tracking_uri) or Path(defaults.ARTIFACT_ROOT).resolve().as_uri(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]  # one user on this machine: one worker starts in seconds, four in ~20 s on 2 cores
