"""Where sweeps keep their state: Optuna storage and the MLflow tracking store.

Defaults are embedded (no server): an Optuna journal file and an MLflow SQLite database, two
different files under results/local/. Remote stores are checked for reachability, read-only,
before anything is written."""

from __future__ import annotations

import contextlib
import functools
import inspect
from pathlib import Path

from grpo_core.util import defaults
from grpo_core.util.errors import UserInputError, interrupts_deferred, mask_secrets, remember_secrets
from grpo_core.util.files import check_sqlite_writable


_RDB_SCHEMES = ("postgresql://", "postgresql+psycopg2://", "mysql://", "sqlite:///")


def describe_storage(url: str | None) -> str:
    return mask_secrets(url) if url else f"journal file {defaults.JOURNAL}"


def journal_path(url: str | None) -> Path | None:
    if url is None:
        return Path(defaults.JOURNAL)
    if url.startswith("journal://"):
        return Path(_one_root_slash(url[len("journal://") :]))
    return None


def _one_root_slash(path: str) -> str:
    """journal:///abs/j.log and journal:////abs/j.log both name /abs/j.log (the second, in SQLite's
    spelling for an absolute path, read as //abs/j.log and was printed so)."""
    return "/" + path.lstrip("/") if path.startswith("//") else path


def journal_url(path: Path) -> str:
    """The --storage URL of a journal file: journal:///abs/path (absolute, so it names the same file
    from any working folder)."""
    return f"journal://{Path(path).resolve()}"


def sqlalchemy_url(url: str) -> str:
    """`postgresql://` with the driver that is installed: SQLAlchemy 2.1 reads a bare
    `postgresql://` as psycopg 3, while this project installs psycopg2 (`psycopg2-binary`)."""
    if url.startswith("postgresql://"):
        import importlib.util

        if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
            return "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def check_storage(url: str | None, must_exist: bool = False) -> None:
    """Raise a one-line UserInputError when the storage URL is malformed or unreachable. A journal
    or SQLite file's folder must exist (the default journal's folder is created); with
    `must_exist` (read-only commands) the file itself must exist, so nothing is created."""
    remember_secrets(url)  # a password in it is masked wherever a message made from it shows
    journal = journal_path(url)
    if journal is not None:
        if must_exist and not journal.is_file():
            raise UserInputError(f"--storage {describe_storage(url)!r}: no such journal file {journal}")
        if url is not None and not journal.resolve().parent.is_dir():
            raise UserInputError(f"--storage {url!r}: folder {journal.resolve().parent} does not exist")
        if journal.is_file():
            _check_journal_readable(journal, url)
        return
    if not url.startswith(_RDB_SCHEMES):
        raise UserInputError(
            f"--storage {url!r}: unknown storage; allowed: journal:///path/file.log, "
            f"postgresql://user:pass@host:port/db, sqlite:///path.db"
        )
    if url.startswith("sqlite:///"):  # connecting would create the file: check its folder instead
        path = Path(url[len("sqlite:///") :])
        if must_exist and not path.is_file():
            raise UserInputError(f"--storage {url!r}: no such database file {path}")
        if not path.resolve().parent.is_dir():
            raise UserInputError(f"--storage {url!r}: folder {path.resolve().parent} does not exist")
        if path.is_file() and path.stat().st_size:
            with open(path, "rb") as f:
                if f.read(16) != SQLITE_MAGIC:
                    raise UserInputError(
                        f"--storage {url!r}: {path} is not a SQLite database; allowed: a SQLite file "
                        f"(or a new one), or {journal_url(path)} if it is an Optuna journal"
                    )
        if not must_exist:  # a folder, or a place this process cannot write: Optuna's traceback otherwise
            check_sqlite_writable(path, f"--storage {url!r}")
        return
    import sqlalchemy

    engine_kwargs = {"connect_args": {"connect_timeout": 5}} if url.startswith("postgresql") else {}
    try:
        engine = sqlalchemy.create_engine(sqlalchemy_url(url), **engine_kwargs)
        with engine.connect():
            pass
    except Exception as exc:  # driver missing, host down, bad credentials
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(f"--storage {url!r}: cannot connect: {first}") from None
    finally:
        with contextlib.suppress(Exception):
            engine.dispose()


SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def repair_journal_tail(url: str | None) -> int:
    """A journal whose last record was cut (its writer died mid-write) is cut back to its last
    whole line before anything is appended, under the journal's own lock: Optuna skips such a
    line when reading, but a record appended after it would join it into one line that no reader
    takes, and every later read of the journal would fail. Returns the bytes removed."""
    from optuna.storages.journal import JournalFileOpenLock

    path = journal_path(url)
    if path is None or not path.is_file():
        return 0
    lock = JournalFileOpenLock(str(path) + ".lock")
    lock.acquire()
    try:
        data = path.read_bytes()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(keep)
        return len(data) - keep
    finally:
        lock.release()


def _check_journal_readable(path: Path, url: str | None) -> None:
    """Every line of an Optuna journal is one JSON object with an `op_code`; a line that is not (a
    truncated or foreign file) makes Optuna fail later with a traceback, so it is refused here. The
    last line may be cut off by a writer that died mid-write: Optuna skips it, and `grpo sweep`
    cuts it off (repair_journal_tail), so it must look like the start of a record: text that opens
    with `{`. Anything else (a binary file, another program's log) is refused, never cut."""
    import json

    from optuna.storages.journal._storage import JournalOperation

    operations = {int(op) for op in JournalOperation}
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise UserInputError(f"--storage {describe_storage(url)!r}: cannot read {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            if number == len(lines):  # the tail after the last newline: a record cut mid-write
                if not line.lstrip().startswith(b"{"):
                    raise ValueError
                line.decode("utf-8", errors="strict")
            elif not isinstance(record := json.loads(line), dict) or record.get("op_code") not in operations:
                raise ValueError  # an op_code Optuna does not know stops its replay on an assert
        except ValueError:  # UnicodeDecodeError is one
            raise UserInputError(
                f"--storage {describe_storage(url)!r}: {path} line {number} is not an Optuna journal "
                f"record; allowed: a journal file written by Optuna (move this one aside)"
            ) from None


def open_storage(url: str | None, heartbeat_interval: int = 30):
    """The Optuna storage for `url`. RDB storages get Optuna's heartbeat: a trial silent for
    3 intervals is stale (its worker died) and RetryHeartbeatStaleTrialCallback retries it."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    path = journal_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:  # the storage replays every record now: one Optuna cannot apply (a field missing) fails here
            return optuna.storages.JournalStorage(
                JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path) + ".lock"))
            )
        except (KeyError, TypeError, ValueError, IndexError, AssertionError) as exc:
            raise UserInputError(
                f"--storage {describe_storage(url)!r}: {path} holds a record Optuna cannot replay "
                f"({type(exc).__name__}: {str(exc)[:80]}); allowed: a journal file written by "
                f"Optuna (move this one aside)"
            ) from None
    import warnings

    params = inspect.signature(optuna.storages.RDBStorage).parameters
    callback = (
        "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in params else "failed_trial_callback"
    )  # renamed in Optuna 4.9
    import random
    import time

    import sqlalchemy.exc

    engine_kwargs, rdb = {"pool_pre_ping": True}, optuna.storages.RDBStorage
    if url.startswith("sqlite"):  # writers wait for SQLite's lock up to 60 s (Python's default, 5 s, ended a loaded
        engine_kwargs["connect_args"] = {"timeout": 60}  # sweep with "database is locked" among its heartbeats)
        rdb = whole_call_rdb_storage()  # each call whole against signals
    for attempt in range(6):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return rdb(
                    sqlalchemy_url(url),
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_interval,
                    grace_period=3 * heartbeat_interval,
                    **{callback: optuna.storages.RetryHeartbeatStaleTrialCallback()},
                )
        except sqlalchemy.exc.DBAPIError:
            # machines starting together on an empty database race to create Optuna's tables;
            # the loser sees "already exists" and finds the tables on its next try
            if attempt == 5:
                raise
            time.sleep(0.5 + random.random())


@functools.cache
def whole_call_rdb_storage():
    """Optuna's RDBStorage whose calls each run whole, for SQLite: SIGTERM or Ctrl-C that comes
    during a call (creating the tables included) is raised when the call returns (interrupts_deferred),
    never inside SQLAlchemy, as MLflow's WholeCallClient does for its SQLite store. There, at the start
    of a commit, it became an AssertionError in SQLAlchemy's error handling: a sweep of two points
    sent SIGTERM at each of its 81 Optuna commits in turn (a fresh sweep for each) ended with that traceback 58
    times, recorded the trial failed (exit 1) 12 times, lost the signal (finished, exit 0) 10 times,
    and stopped cleanly (143) once (tests/test_interrupted_claims.py sends it at two of them). A
    PostgreSQL storage is left as it is: its calls wait on the network, where Ctrl-C must still stop them."""
    import optuna

    base = optuna.storages.RDBStorage

    def whole(method):
        @functools.wraps(method)
        def call(*args, **kwargs):
            with interrupts_deferred():
                return method(*args, **kwargs)

        return call

    # every method, private ones too (Optuna's cache calls the storage's _get_trials, _create_new_trial, ...)
    names = ["__init__"] + [
        name
        for name in dir(base)
        if not name.startswith("__") and inspect.isfunction(inspect.getattr_static(base, name))
    ]  # (static ones left as they are)
    return type(
        "WholeCallRDBStorage", (base,), {"__module__": __name__, **{name: whole(getattr(base, name)) for name in names}}
    )


def check_distinct(storage_url: str | None, tracking_uri: str) -> None:
    """The MLflow store and the Optuna storage must never be the same file."""

    def file_of(uri: str | None) -> Path | None:
        if uri is None:
            return Path(defaults.JOURNAL).resolve()
        if uri.startswith("journal://"):
            return journal_path(uri).resolve()
        if uri.startswith("sqlite:///"):
            return Path(uri[len("sqlite:///") :]).resolve()
        return None

    a, b = file_of(storage_url), file_of(tracking_uri)
    if a is not None and a == b:
        raise UserInputError(
            f"--storage and --tracking-uri name the same file {a}; give Optuna and MLflow separate stores"
        )


def claim_lock_path(storage_url: str | None, study_name: str) -> Path:
    """A host-local lock serialising 'find a free grid point, then create its trial' among the
    workers of one machine. Workers on other machines rely on the storage's atomic trial numbers."""
    path = journal_path(storage_url)
    base = path.parent if path is not None else Path(defaults.LOCAL)
    return base / f".claim-{study_name}.lock"


__all__ = ["check_storage", "open_storage", "check_distinct", "claim_lock_path", "describe_storage"]
