"""A trial's run goes on from where an earlier run of its config stopped.

A run of a spec with `save_steps` writes `checkpoint-<step>` into its folder as it trains. When that
run is killed (SIGTERM, Ctrl-C, a preempted machine, `--stop-after` reached by a later session's
SIGTERM) or fails, the next `grpo sweep` claims its point again; the trial then resumes the killed
run in its own folder from its latest checkpoint instead of training from step 1: the steps up to
the checkpoint are kept, and on a CPU the metrics are those of a run that was never stopped
(grpo_core/record/checkpoint.py). Only a folder whose checkpoint was written with exactly the config
this trial would train (but where it is logged and how many threads: config/checkpoint_compat.py)
is taken, and none that another process holds. A finished run's checkpoints are removed: they could
only resume a run that is done, and run folders are what gets committed and copied.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import yaml

from grpo_core.config.checkpoint_compat import CHECKPOINT_STATE, config_mismatch
from grpo_core.config.schema import GRPOConfig

_NOT_RESUMED = ("finished", "pruned")  # done, or stopped on purpose by a search's pruner


def step_of(checkpoint: Path) -> int:
    """The step of a `checkpoint-<step>` folder; -1 for another name."""
    tail = checkpoint.name.split("-")[-1]
    return int(tail) if tail.isdigit() else -1


def _stopped(folder: Path) -> bool:
    """The folder's run did not finish: killed, failed or abandoned, or no summary (its process died)."""
    try:
        status = json.loads((folder / "summary.json").read_text()).get("status")
    except FileNotFoundError:
        return True
    except (OSError, ValueError, AttributeError):
        return False  # damaged: left alone, as the report leaves it out
    return status not in _NOT_RESUMED


def _held(folder: Path) -> bool:
    """Another process writes this folder now (the run lock that grpo_core/run.py takes)."""
    from filelock import FileLock, Timeout

    from grpo_core.run import RUN_LOCK

    if not (folder / RUN_LOCK).exists():
        return False
    lock = FileLock(folder / RUN_LOCK, timeout=0)
    try:
        lock.acquire()
    except (Timeout, OSError):
        return True
    lock.release()
    return False


def resumable_checkpoint(root: Path, cfg: GRPOConfig) -> Optional[Path]:
    """The latest checkpoint, among the stopped runs under `root` (a sweep's folder: trial-*/ and a
    search's trial-*/seed-*/), written with `cfg`'s config; None where there is none."""
    if not cfg.save_steps or not root.is_dir():
        return None
    current = cfg.to_dict()
    found: list[Path] = []
    for folder in [*root.glob("trial-*"), *root.glob("trial-*/seed-*")]:
        if not folder.is_dir() or not _stopped(folder):
            continue
        for checkpoint in folder.glob("checkpoint-*"):
            if not (checkpoint / CHECKPOINT_STATE).is_file() or step_of(checkpoint) < 0:
                continue
            try:
                saved = yaml.safe_load((checkpoint / "config.yaml").read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(saved, dict) and config_mismatch(saved, current) is None:
                found.append(checkpoint)
    # the latest of the folders no other process holds: one held (its run resumed by another worker, or
    # recovered) leaves the next best, where it had left the point to train from step 1
    for checkpoint in sorted(found, key=step_of, reverse=True):
        if not _held(checkpoint.parent):
            return checkpoint
    return None


def drop_checkpoints(folder: Path) -> None:
    """Remove a finished run's checkpoints."""
    for checkpoint in folder.glob("checkpoint-*"):
        if checkpoint.is_dir() and step_of(checkpoint) >= 0:
            shutil.rmtree(checkpoint, ignore_errors=True)
