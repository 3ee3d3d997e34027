"""Errors that the command line turns into one line and an exit code, and the masking of secrets
in anything it prints or logs."""

import contextlib
import re
import signal
from collections.abc import Iterator


def short_value(value: object) -> str:
    """A value for an error line: its repr, cut to 60 characters (a 10 MB string stays one line)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"


def cause_line(exc: BaseException, limit: int = 200) -> str:
    """An error in one line, named by its deepest cause: a tracking store's database error reads
    "OperationalError: database is locked", not the SQLAlchemy preamble MLflow's wrapper starts with."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's own error
    exc = orig if isinstance(orig, BaseException) else exc
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:limit]}"


class UserInputError(ValueError):
    """Bad input from the user: a config key, a file, a name. Message is one line; exit code 2."""


class ConfigError(UserInputError):
    """A config value that is not allowed; the message names the key and what is allowed."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


class RunFailure(RuntimeError):
    """A run stopped on purpose (non-finite loss, a reward function that raised, ...); exit code 1."""


class PeerDied(RunFailure):
    """Another process of a data-parallel run died: the run is recorded as killed, naming it."""


class RecordIncomplete(RunFailure):
    """The run itself finished, but part of its record could not be written (MLflow unreachable, a
    full disk): the message says which; `summary` is what the run computed. Exit code 1."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


class RunPruned(Exception):
    """A search's pruner stopped the run after `step` (its smoothed reward behind the other trials'
    at that step): recorded as pruned in its folder, in MLflow (KILLED, tag status=pruned) and in
    Optuna (PRUNED), never as failed or finished."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"pruned after step {step}: {reason}")
        self.step = step


class RunAbandoned(Exception):
    """A sweep's trial was failed by another process while its worker could not answer (paused past
    the heartbeat window: a suspended laptop, an overloaded node), and its point may be running
    again elsewhere: the worker stops writing at its next step. Recorded as abandoned in its folder
    and in MLflow (KILLED, tag status=abandoned), once; Optuna already holds the trial as failed."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, Slurm, Kubernetes, docker stop): handled as Ctrl-C is, exit code 143."""


def ended_by(exc: BaseException) -> str:
    """The status of a run or trial that this exception ended, in its folder and in MLflow: Ctrl-C
    and SIGTERM killed it, RunAbandoned abandoned it, anything else failed it."""
    return (
        "abandoned" if isinstance(exc, RunAbandoned) else "killed" if isinstance(exc, KeyboardInterrupt) else "failed"
    )


def ended_record(exc: BaseException) -> tuple[dict, str]:
    """The summary and the status a logger ends a run or trial with when this exception stopped it
    before its own summary existed: `logger.end(*ended_record(exc), None)`."""
    return {"error": f"{type(exc).__name__}: {exc}"}, ended_by(exc)


def release_frames(exc: BaseException) -> None:
    """Free what the frames an exception passed through still hold (their local variables), before
    a run or trial is recorded in the handler that caught it. Ctrl-C or SIGTERM raised in the middle
    of a read from MLflow's SQLite store leaves that read's cursor referenced by those frames: the
    cursor keeps SQLite's shared lock after its connection is closed, so every write of the record
    from this process waited out SQLite's busy timeout (20 s) and failed with "database is locked"
    (a sweep's killed trial was recorded as failed, 40-60 s later). The traceback's text is kept.
    Cleared frames are not always enough: in 2 of 16 kills of a two-worker search that reached this
    handler a cursor, held by an SQLAlchemy execution context and its result, outlived them until
    the garbage collector ran, so it runs here, with signals held (_collect_with_signals_held)."""
    import traceback

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # and the exceptions it was raised from or during
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)  # (a frame still running keeps its variables)
        exc = exc.__cause__ or exc.__context__
    _collect_with_signals_held()


def _collect_with_signals_held() -> None:
    """gc.collect(), with SIGTERM and SIGINT held while it runs and raised again after it, to
    whatever handles them here. A signal whose handler raises, landing in a finalizer the collector
    runs, is printed as "Exception ignored" and lost (a data-parallel launcher's SIGTERM did, in a
    test, when this collection ran unguarded)."""
    import gc

    with interrupts_deferred():
        gc.collect()


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGTERM and Ctrl-C that come while the block runs are raised when it ends, however it ends,
    by their own handlers, as if they came then (each signal once, in the order they came)."""
    held: list[int] = []
    try:
        with signals_held(signal.SIGTERM, signal.SIGINT) as held:
            yield
    finally:
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


@contextlib.contextmanager
def signals_held(*signums: int) -> Iterator[list[int]]:
    """While the block runs, these signals are not handled but held: the list it yields names each
    one that came, in order, for the caller to act on after the block; their handlers are put back
    however the block ends. Outside the main thread, where no signal handler runs, it holds nothing."""
    held: list[int] = []
    with contextlib.ExitStack() as restore:  # every handler put back, even if one raises as it is
        try:
            for signum in signums:
                if signal.getsignal(signum) is not None:  # (None: set outside Python, could not be put back)
                    restore.callback(signal.signal, signum, signal.signal(signum, lambda n, _: held.append(n)))
        except ValueError:  # not the main thread
            pass
        yield held


def _raise_terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # while the run is recorded as killed
    if not _sigterm_ignored[0]:
        raise Terminated()


_sigterm_ignored = [False]  # ignore_sigterm: this process's end is decided, a SIGTERM says nothing new


def ignore_sigterm() -> None:
    """From now on this process ignores SIGTERM, also where a block puts the handler back
    (signals_held): a data-parallel run whose peer died is recorded as killed for that, and the
    launcher's SIGTERM to the processes left, which can come at any moment after (its monitor looks
    every 0.2 s), says nothing new. Raised as Terminated after the record, it would end the process
    with 143 where PeerDied's is 1 (a likely cause of the 143 in a fresh-clone CI run of 2026-11-30).
    handle_sigterm, at the start of a command, undoes it."""
    _sigterm_ignored[0] = True
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (inside a held block: the handler put back checks the flag)
    except ValueError:  # not the main thread, where no handler runs
        pass


def handle_sigterm() -> None:
    """From now on SIGTERM raises Terminated in the main thread, so runs and sweeps end as they do
    on Ctrl-C (recorded as killed). A second SIGTERM during that record is ignored. An interrupt
    that lands in a finalizer is not lost (_redeliver_lost_interrupt)."""
    import sys

    _sigterm_ignored[0] = False
    signal.signal(signal.SIGTERM, _raise_terminated)
    if sys.unraisablehook is not _redeliver_lost_interrupt:  # (installed once: the hook before it kept)
        _previous_hook[:] = [sys.unraisablehook]
        sys.unraisablehook = _redeliver_lost_interrupt


_previous_hook: list = []
_REDELIVER_AFTER_S = 0.01


def _redeliver_lost_interrupt(unraisable) -> None:
    """sys.unraisablehook: SIGTERM or Ctrl-C whose handler raised inside a finalizer (a weakref's
    callback, a __del__ run by an automatic garbage collection) cannot leave it; Python printed
    "Exception ignored" with a traceback and went on as if no signal had come (a killed search's
    orphaned worker did, in CI). The signal is sent to the main thread again a moment later, once
    the finalizer is done, and nothing is printed; any other exception goes to the hook before."""
    import sys
    import threading

    exc = unraisable.exc_value
    previous = _previous_hook[0] if _previous_hook else sys.__unraisablehook__
    if not isinstance(exc, KeyboardInterrupt):
        return previous(unraisable)
    signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    try:
        if signum == signal.SIGTERM and signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, _raise_terminated)  # (its handler ignores a second one while it records)
        again = threading.Timer(_REDELIVER_AFTER_S, signal.pthread_kill, (threading.main_thread().ident, signum))
        again.daemon = True  # (a process ending meanwhile does not wait for it)
        again.start()
    except (RuntimeError, ValueError):  # interpreter shutting down (no new thread), not the main thread
        previous(unraisable)


_URL = re.compile(r"(?P<scheme>[A-Za-z][\w+.-]*://)(?P<rest>[^\s'\"<>]+)")
_SECRET_PARAM = re.compile(
    r"(?i)(?P<key>(?:^|[?&;])(?:password|passwd|pwd|pass|secret|token|api[_-]?key|"
    r"access[_-]?token|sslpassword)=)(?P<value>[^&;#]*)"
)


_KNOWN: set[str] = set()  # every password seen in a URL by this process: masked wherever it shows again
_SHORTEST = 4  # a shorter one is masked in its URL only (masking "ab" everywhere would garble the text)


def _remember(secret: str) -> None:
    from urllib.parse import quote, unquote

    for form in (secret, unquote(secret), quote(unquote(secret), safe="")):
        if len(form) >= _SHORTEST:
            _KNOWN.add(form)


def _mask_url(m: re.Match) -> str:
    rest = m["rest"]
    query_at = rest.find("?")
    head, query = (rest, "") if query_at < 0 else (rest[:query_at], rest[query_at:])
    # the credentials end at the last '@' of the address: a password may hold '/', ':' or '@'
    at = head.rfind("@")
    if at > 0 and not head.startswith("/") and ":" in head[:at]:
        user, secret = head[:at].split(":", 1)
        _remember(secret)
        head = f"{user}:***@{head[at + 1 :]}"

    def param(q: re.Match) -> str:
        _remember(q["value"])
        return q["key"] + "***"

    return m["scheme"] + head + _SECRET_PARAM.sub(param, query)


def mask_secrets(text: str) -> str:
    """Passwords in URLs, anywhere in the text: `scheme://user:password@host` → `user:***@host`
    (whatever the password holds), and `?password=…` (or secret, token, api_key) → `password=***`.
    A password once seen is masked wherever it shows again, in any later text too: a path or
    message made from the URL (a journal's folder, a library's error) carries it without the
    URL's shape. The one function every printed line, run-folder file and MLflow record passes."""
    text = _URL.sub(_mask_url, str(text))
    for secret in sorted(_KNOWN, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def remember_secrets(*texts) -> None:
    """Learn the passwords in these texts (command-line arguments, config values, the environment)
    before anything prints or writes them."""
    for text in texts:
        if isinstance(text, str) and "://" in text:
            mask_secrets(text)
