"""One training run with its run folder: config.yaml before the first step, metrics.jsonl one
line per optimizer step (flushed, so a killed run keeps its steps), summary.json at the end with
`status` finished | failed | killed (| pruned | abandoned, in a sweep). Nothing a user ran is lost."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import signal
import socket
import traceback
from pathlib import Path
from typing import Callable, Iterator, Optional, Protocol

from grpo_core.config.schema import GRPOConfig, save_config
from grpo_core.util.distributed import dead_peer
from grpo_core.util.errors import (
    PeerDied,
    RecordIncomplete,
    RunAbandoned,
    RunFailure,
    RunPruned,
    Terminated,
    UserInputError,
    cause_line,
    ignore_sigterm,
    release_frames,
    signals_held,
)
from grpo_core.util.memory import memory_failure
from grpo_core.util.files import read_metrics, read_text_named, write_text_atomic  # noqa: F401  (read_metrics: its old home)

TIMING_KEYS = ("step_time", "tokens_per_second")


class RunLogger(Protocol):
    """Where a run is mirrored (MLflow); all methods are called from the training process."""

    def log_step(self, metrics: dict) -> None: ...
    def end(self, summary: dict, status: str, run_dir: Path) -> None: ...


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_json(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps({k: _json_value(v) for k, v in data.items()}, indent=2, sort_keys=True) + "\n")


DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO}
RESERVE = ".grpo-reserve"  # kept in every run folder while it trains, freed to write the failure record
RUN_MARKER = ".grpo-mlflow-run"  # the MLflow run that writes the folder now
RESERVE_BYTES = 256 * 1024


def disk_failure(exc: BaseException, where: Path) -> Optional[RunFailure]:
    """A RunFailure naming the folder when `exc` is a write that the disk refused (full, quota,
    read-only), else None. torch.save reports a full disk as a RuntimeError: the free space tells."""
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        return RunFailure(f"cannot write {exc.filename or where}: {exc.strerror}")
    if isinstance(exc, RuntimeError):  # torch.save's zip writer: "file write failed", "unexpected pos", ...
        try:
            free = shutil.disk_usage(where).free
        except OSError:
            return None
        if free < 4 * RESERVE_BYTES:
            return RunFailure(f"cannot write in {where}: {os.strerror(errno.ENOSPC)} ({free} bytes free)")
    return None


class _MetricsFile:
    """metrics.jsonl, one line per step, written straight to the file (no buffer that could hold half a
    line): a write the disk refuses is cut back to the last whole line before the error goes on."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.size = 0

    def write_line(self, text: str) -> None:
        data = (text + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:
            os.ftruncate(self.fd, self.size)  # never a cut line for a resume or `grpo recover` to trip on
            raise
        self.size += len(data)

    def close(self) -> None:
        os.close(self.fd)


def read_metrics_skipping(path: str | Path) -> tuple[list[dict], int]:
    """Every line that reads as a JSON object with a step, and how many did not (recovery of a
    damaged folder: `grpo recover`)."""
    rows, bad = [], 0
    for line in Path(path).read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def read_metrics_lenient(path: str | Path) -> list[dict]:
    """metrics.jsonl or completions.jsonl of a run that may have been killed: one JSON object per
    line, a last line cut off mid-write left out. Any other line that is not one is a
    UserInputError naming the file and the line."""
    lines = [(n, line) for n, line in enumerate(read_text_named(path).splitlines(), 1) if line.strip()]
    rows = []
    for i, (n, line) in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:
                continue
            row = None
        if not isinstance(row, dict):
            raise UserInputError(
                f"{path}: line {n} is not a JSON object; allowed: one JSON object per line, as grpo writes them"
            )
        rows.append(row)
    return rows


def mark_killed(folder: Path, reason: str) -> Optional[str]:
    """The folder of a run whose process died unrecorded: its reserved space freed and, where it has
    no summary.json yet, one that says killed with `reason`. Returns why that could not be written,
    or None."""
    (folder / RESERVE).unlink(missing_ok=True)  # the space a SIGKILLed run kept
    if folder.is_dir() and not (folder / "summary.json").exists():
        try:
            write_json(folder / "summary.json", {"status": "killed", "error": reason})
        except OSError as exc:
            return f"its summary.json could not be written ({exc.strerror})"
    return None


RUN_LOCK = ".grpo-run.lock"  # held by the run writing the folder, for the run's whole life


def refuse_links(folder: Path) -> None:
    """A run writes only inside its own folder: a symbolic link in it (a metrics.jsonl, a checkpoint
    folder, the lock file) would carry its writes outside, so a folder holding one is refused,
    before anything is opened."""
    for root, dirs, files in os.walk(folder):  # links to folders are listed in dirs, never entered
        for name in [*dirs, *files]:
            path = Path(root, name)
            if path.is_symlink():
                raise UserInputError(
                    f"--out {folder}: {path.relative_to(folder)} is a symbolic link (to "
                    f"{os.readlink(path)}); a run writes only inside its own folder; allowed: "
                    f"a folder of plain files"
                )


@contextlib.contextmanager
def claim_run_folder(out: Path, allow_existing: bool = False) -> Iterator[Path]:
    """One writer per run folder: create it (or take an existing one when resuming in place) and
    hold an exclusive lock on it until the run ends. A second writer gets a one-line error. A run
    refused before it wrote anything (bad input found while loading) leaves no folder behind."""
    from filelock import FileLock, Timeout

    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {out}: is a file; allowed: a new or empty folder")
    if not allow_existing and out.is_dir() and not (out / RUN_LOCK).exists() and any(out.iterdir()):
        raise UserInputError(f"--out {out}: folder exists and is not empty; choose a new folder")  # nothing written
    if out.is_dir():
        refuse_links(out)
    created = not out.exists()
    had_lock_file = (out / RUN_LOCK).exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = FileLock(out / RUN_LOCK, timeout=0)
        lock.acquire()
    except Timeout:
        holder = (out / RUN_LOCK).read_text().strip() or "unknown"
        raise UserInputError(
            f"--out {out}: another grpo run ({holder}) is writing to this folder; choose another folder"
        ) from None
    except OSError as exc:
        raise UserInputError(f"--out {out}: cannot write there: {exc.strerror or exc}") from None
    try:
        (out / RUN_LOCK).write_text(f"pid {os.getpid()} on {socket.gethostname()}\n")
        if not allow_existing and any(p.name != RUN_LOCK for p in out.iterdir()):
            raise UserInputError(f"--out {out}: folder exists and is not empty; choose a new folder")
        yield out
    except UserInputError:
        if created and all(p.name == RUN_LOCK for p in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)  # refused before anything was written
        elif not had_lock_file:  # a folder of the user's is left as it was
            (out / RUN_LOCK).unlink(missing_ok=True)
        raise
    finally:
        lock.release()


def run_training(
    cfg: GRPOConfig,
    out_dir: str | Path,
    *,
    logger: Optional[RunLogger] = None,
    progress: bool = True,
    reward_funcs: Optional[dict[str, Callable]] = None,
    allow_existing: bool = False,
) -> dict:
    """Claim the run folder, build the trainer and read the checkpoint (bad input raises before
    anything is written), then train and record. `allow_existing`: resume in the checkpoint's folder.
    In a data-parallel run only process 0 does this; the others train beside it and write nothing."""
    from grpo_core.util.distributed import is_main_process

    if not is_main_process():
        return _train_beside_main(cfg, Path(out_dir), reward_funcs)
    global runs_started
    with claim_run_folder(Path(out_dir), allow_existing) as out:
        runs_started += 1  # from here an interrupted run is recorded (killed): the command says so
        from grpo_core.record.checkpoint import load_checkpoint
        from grpo_core.trainer import GRPOTrainer

        trainer = GRPOTrainer(cfg, reward_funcs=reward_funcs)
        try:
            history = load_checkpoint(trainer, cfg.resume_from_checkpoint) if cfg.resume_from_checkpoint else None
            kept = resumed_metrics(cfg)  # the steps up to the checkpoint, when resuming
            return _train_and_record(cfg, out, trainer, history, kept, logger, progress)
        finally:
            trainer.close()


def _train_beside_main(cfg: GRPOConfig, out: Path, reward_funcs) -> dict:
    """A process other than 0 of a data-parallel run: the same steps (its share of each batch),
    no folder, no MLflow, no progress bar. It takes part in checkpoints, which process 0 writes."""
    from grpo_core.record.checkpoint import load_checkpoint
    from grpo_core.trainer import GRPOTrainer

    trainer = GRPOTrainer(cfg, reward_funcs=reward_funcs)
    try:
        history = load_checkpoint(trainer, cfg.resume_from_checkpoint) if cfg.resume_from_checkpoint else None
        return trainer.train(checkpoint_dir=out, history=history)
    finally:
        trainer.close()


def _reserve(out: Path) -> Path:
    """Set aside RESERVE_BYTES in the run folder (real blocks, not a sparse file), freed to write the
    failure record when the disk fills during the run. No room for it: a one-line refusal."""
    path = out / RESERVE
    try:  # written zeros take their blocks at write() (a filesystem reserves them even before writeback)
        with open(path, "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise UserInputError(
            f"--out {out}: no room to start a run there ({exc.strerror}); allowed: a folder on a disk with free space"
        ) from None
    return path


def _train_and_record(cfg, out: Path, trainer, history, kept: list[dict], logger, progress: bool) -> dict:
    reserve = _reserve(out)
    status, summary, error = "failed", {}, None
    bar, metrics_file, completions_file = None, None, None
    try:
        save_config(cfg, out)
        run_id = getattr(logger, "run_id", None)
        if run_id:  # the folder now belongs to this MLflow run (a resume takes it over; grpo recover reads it)
            write_text_atomic(out / RUN_MARKER, run_id + "\n")
        bar = _progress_bar(cfg.max_steps, progress)
        metrics_file = _MetricsFile(out / "metrics.jsonl")
        for line in kept:  # a resumed run's folder and MLflow run hold every step, 1 … max_steps
            metrics_file.write_line(json.dumps(line))
            if logger is not None:
                logger.log_step(line)
        if bar is not None:
            bar.update(len(kept))
        if cfg.log_completions:
            earlier = resumed_rows(cfg, COMPLETIONS)  # read before the file is opened anew (a resume in its folder)
            completions_file = _MetricsFile(out / COMPLETIONS)
            for row in earlier:
                completions_file.write_line(json.dumps(row))

        printing = True  # until the terminal is gone (`grpo train | head` closes the pipe)

        def on_step(metrics: dict) -> None:
            nonlocal printing
            if completions_file is not None:  # first: a step's completions are on disk before its metrics
                for row in trainer.last_completions:
                    completions_file.write_line(json.dumps(row))
                if cfg.num_completions_to_print and trainer.last_completions and printing:
                    printing = _print_completions(trainer.last_completions[: cfg.num_completions_to_print], bar)
            metrics_file.write_line(json.dumps({k: _json_value(v) for k, v in metrics.items()}))
            if logger is not None:
                logger.log_step(metrics)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['reward']:.3f}", loss=f"{metrics['loss']:.2e}", refresh=False)

        summary = trainer.train(on_step=on_step, checkpoint_dir=out, history=history)
        status = "finished"
    except RunPruned as exc:  # a search's pruner: the steps so far stand, as pruned
        status, summary, error = "pruned", {"pruned_after_step": exc.step, "prune_reason": str(exc)}, exc
    except RunAbandoned as exc:  # its trial was failed elsewhere: the steps so far stand, the run is not the point's
        status, summary, error = "abandoned", {"abandoned_after_step": trainer.step, "error": str(exc)}, exc
    except RunFailure as exc:
        summary, error = {"error": str(exc)}, exc
    except BaseException as exc:
        with _sigterm_held():  # the launcher's SIGTERM may come while it looks: it says the same
            peer = (
                dead_peer(wait_s=5.0) if type(exc) is not KeyboardInterrupt else None
            )  # not Ctrl-C, which every process gets
        if peer is not None:  # gloo's "Connection closed by peer", or the launcher's SIGTERM: a peer died first
            ignore_sigterm()  # the launcher's SIGTERM to this process, now or after the record, says the same
            message = f"{peer}; the run stopped after step {trainer.step}"
            status, summary, error = "killed", {"error": message}, PeerDied(message)
        elif isinstance(exc, KeyboardInterrupt):
            what = "SIGTERM" if isinstance(exc, Terminated) else "KeyboardInterrupt"
            status, summary, error = "killed", {"error": f"interrupted ({what})"}, exc
        else:
            error = disk_failure(exc, out) or memory_failure(exc) or exc
            summary = {"error": str(error) if isinstance(error, RunFailure) else f"{type(exc).__name__}: {exc}"}
            if not isinstance(error, RunFailure):
                summary["traceback"] = traceback.format_exc(limit=20)
        # once the cause is read (a full disk is told by the space its half-written file still holds): a read
        # from the store that the exception interrupted would hold SQLite's lock against the record. Held
        # as the record is (below): a launcher's SIGTERM that comes during its garbage collection waits too
        with _sigterm_held():
            release_frames(exc)
    finally:
        if bar is not None:
            bar.close()
        for file in (metrics_file, completions_file):
            if file is not None:
                file.close()
    # the record, the folder first: each part that cannot be written is said, none hides the run's own end.
    # A SIGTERM now (a data-parallel launcher stopping the processes a dead peer left) waits until it is written.
    with _sigterm_held():
        return _record(cfg, out, trainer, reserve, status, summary, error, logger)


_held_sigterm = False  # a SIGTERM came while a run's record was written: held, not lost (take_held_sigterm)


@contextlib.contextmanager
def _sigterm_held() -> Iterator[None]:
    """SIGTERM held while the block runs: the record is written whole, and the signal is kept for
    the caller to act on after it (a sweep's worker stops before it claims another trial). It had
    been ignored, and lost: a worker whose sweep died (its parent-death SIGTERM) while it recorded
    a finished run went on claiming trials as an orphan."""
    global _held_sigterm
    held: list[int] = []
    try:
        with signals_held(signal.SIGTERM) as held:
            yield
    finally:  # (once its handler is back: one that came as it was put back is counted too)
        _held_sigterm = _held_sigterm or bool(held)


def take_held_sigterm() -> bool:
    """Whether a SIGTERM came while a run's record was being written (and was held); clears it."""
    global _held_sigterm
    held, _held_sigterm = _held_sigterm, False
    return held


def _record(cfg, out: Path, trainer, reserve: Path, status: str, summary: dict, error, logger) -> dict:
    summary = {"status": status, "steps_completed": trainer.step, **trainer.record, **summary}
    reserve.unlink(missing_ok=True)  # the space kept for this moment
    missing = []
    try:
        write_json(out / "summary.json", summary)
    except OSError as exc:
        missing.append(f"{out / 'summary.json'}: {exc.strerror}")
    if logger is not None:
        try:
            logger.end(summary, status, out)
        except Exception as exc:  # a tracking server that went away, its database full
            missing.append(f"MLflow: {cause_line(exc)}")
        except KeyboardInterrupt as again:  # Ctrl-C (again) while MLflow is written (SIGTERM waits): out now
            stop = error if isinstance(error, KeyboardInterrupt) else again
            stop.add_note(
                f"the run is recorded as {status} in {out}; its MLflow record was interrupted as it was "
                "written: `grpo recover` completes it from the folder"
            )
            raise stop from None
    if error is not None:
        if missing and isinstance(error, RunFailure):
            raise RunFailure(f"{error}; and its record is incomplete: {'; '.join(missing)}") from None
        raise error
    if missing:
        raise RecordIncomplete(
            f"the run in {out} finished, but its record is incomplete: {'; '.join(missing)}; "
            f"`grpo recover` completes an MLflow record from the run folder",
            summary,
        )
    return summary


COMPLETIONS = "completions.jsonl"  # a sample of each step's completions (log_completions)
runs_started = 0  # runs this process began training (their folders claimed): what an interrupt leaves recorded


def resumed_metrics(cfg: GRPOConfig) -> list[dict]:
    """The metrics.jsonl lines of the checkpoint's run up to the checkpoint's step."""
    return resumed_rows(cfg, "metrics.jsonl")


def resumed_rows(cfg: GRPOConfig, name: str) -> list[dict]:
    """The lines of the checkpoint's run's `name` (metrics.jsonl, completions.jsonl) up to the checkpoint's step."""
    if not cfg.resume_from_checkpoint:
        return []
    folder = Path(cfg.resume_from_checkpoint)
    step = int(folder.name.rsplit("-", 1)[-1]) if folder.name.rsplit("-", 1)[-1].isdigit() else None
    source = folder.parent / name
    if step is None or not source.is_file():
        return []
    return [m for m in read_metrics_lenient(source) if m.get("step", 0) <= step]


def _print_completions(rows: list[dict], bar) -> bool:
    """A few of the step's completions on the terminal (num_completions_to_print), above the progress
    bar. False once the terminal cannot take them (a closed pipe, as `grpo train | head` leaves): the
    run goes on, and its completions.jsonl and MLflow table hold every row."""
    write = bar.write if bar is not None else print
    try:
        for row in rows:
            cut = " [cut at max_completion_length]" if row["truncated"] else ""
            write(
                f"step {row['step']} · reward {row['reward']:.3g} · advantage {row['advantage']:+.3f} · "
                f"{row['length']} tokens{cut}\n  prompt: {row['prompt']!r}\n  completion: {row['completion']!r}"
            )
    except (BrokenPipeError, ValueError):  # ValueError: a stdout that was closed
        return False
    return True


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="grpo", unit="step", dynamic_ncols=True)
