"""Small filesystem helpers shared by the run folder, the caches and the stores: an atomic write,
and the check that a folder can be written before anything is. Imports nothing heavy."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from grpo_core.util.errors import UserInputError


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so a reader
    sees the old file or the new one, never half of one; the temporary file never stays behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A new folder built beside `target` and renamed into place when the block ends without an
    error (an existing `target` is replaced); on any error (a full disk) the partial folder is
    removed, so a reader finds the whole folder or none."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        yield tmp
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_writable_folder(path: str | Path, flag: str) -> None:
    """Before anything is written anywhere: `path` is a folder this process can write in, or can
    be made in one (a probe file in the nearest existing folder: os.access says yes to root on a
    read-only filesystem). One-line UserInputError otherwise."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserInputError(f"{flag} {path}: is a file; allowed: a folder")
    existing = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise UserInputError(
            f"{flag} {path}: cannot write there ({exc.strerror or exc}); allowed: a writable folder"
        ) from None


def sqlite_fault(path: Path) -> Optional[str]:
    """Whether the SQLite file `path` is cut short, from its header alone (a constant-time read, not
    a scan): its size must be whole pages and hold the pages the header counts. A file cut
    mid-write (a full disk) reads its first pages and fails later, inside a run's record. None
    when it looks whole."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100:
        return f"{size} bytes, shorter than a SQLite header"
    page = int.from_bytes(header[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return f"page size {page} in its header"
    if size % page:
        return f"{size} bytes, not a whole number of {page}-byte pages"
    pages = int.from_bytes(header[28:32], "big")
    valid = header[92:96] == header[24:28]  # the header's page count is current
    if valid and pages * page > size:
        return f"{size // page} of the {pages} pages its header counts"
    return None


def check_sqlite_writable(path: Path, where: str) -> None:
    """Before anything trains: the SQLite store is a SQLite file (or not there yet) that this
    process can write, in a folder where SQLite can keep its journal. Found only at the end, a
    store that cannot be written costs a run's MLflow record, after MLflow's retries."""
    if path.is_dir():
        raise UserInputError(f"{where}: {path} is a folder; allowed: a SQLite database file")
    if path.is_file() and path.stat().st_size:
        with open(path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                raise UserInputError(
                    f"{where}: {path} is not a SQLite database; allowed: an MLflow SQLite file or a new path"
                )
        if (fault := sqlite_fault(path)) is not None:
            raise UserInputError(
                f"{where}: {path} is damaged ({fault}: a file cut short, as a full disk leaves one); "
                f"allowed: an intact MLflow SQLite file (restore it, or move it aside and start a "
                f"new one: the run folders hold every run, and `grpo recover` logs them again)"
            )
    folder = next((p for p in [path.parent, *path.parent.parents] if p.exists()), Path("."))
    try:  # a probe file (os.access says yes to root on a read-only filesystem)
        with tempfile.TemporaryFile(dir=folder):
            pass
        if path.is_file():
            with open(path, "ab"):
                pass
    except OSError as exc:
        raise UserInputError(
            f"{where}: cannot write there ({exc.strerror or exc}); allowed: a SQLite file in a writable folder"
        ) from None


def read_text_named(path: str | Path) -> str:
    """A run folder's file as text; a file that is not UTF-8 or cannot be read is a UserInputError
    naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"{path}: not UTF-8 text (byte {exc.start}); allowed: the file as grpo wrote it") from None
    except OSError as exc:
        raise UserInputError(f"{path}: cannot be read ({exc.strerror or exc}); allowed: a readable file") from None


def read_mapping_named(path: str | Path, kind: str = "json") -> dict:
    """config.yaml (kind yaml) or summary.json as a mapping; a file cut, damaged or of another
    shape is a UserInputError naming it."""
    import yaml

    text = read_text_named(path)
    try:
        value = (yaml.safe_load(text) or {}) if kind == "yaml" else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserInputError(f"{path}: cut or damaged ({why}); allowed: the file as grpo wrote it") from None
    if not isinstance(value, dict):
        raise UserInputError(
            f"{path}: holds a {type(value).__name__}, not a mapping; allowed: the file as grpo wrote it"
        )
    return value


def read_metrics(path: str | Path) -> list[dict]:
    """A run's metrics.jsonl (or any JSON-lines file): one dict per line."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
