"""Whether a checkpoint folder can resume a run: its two files exist, and the config it was written
with is the run's config (but the keys a resumed run may change). No torch: validation uses it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grpo_core.config.schema import GRPOConfig
from grpo_core.util.errors import ConfigError
from grpo_core.util.files import read_mapping_named

CHECKPOINT_STATE = "trainer_state.pt"
_RESUME_MAY_DIFFER = {
    "resume_from_checkpoint",
    "save_steps",
    "run_name",
    "mlflow_tracking_uri",
    "mlflow_experiment",
    "num_threads",
}


def check_checkpoint_folder(path: str) -> None:
    """The folder holds a checkpoint's two files (existence only)."""
    folder = Path(path)
    if not (folder / CHECKPOINT_STATE).is_file() or not (folder / "config.yaml").is_file():
        raise ConfigError(
            "resume_from_checkpoint",
            f"{str(folder)!r} is not a checkpoint folder (allowed: a <run folder>/checkpoint-<step> folder)",
        )


def check_checkpoint(cfg: GRPOConfig) -> None:
    """The checkpoint folder exists and was written by a run with the same config."""
    folder = Path(cfg.resume_from_checkpoint)
    check_checkpoint_folder(cfg.resume_from_checkpoint)
    saved = read_mapping_named(folder / "config.yaml", "yaml")  # a !!python tag: one line naming the file
    current = cfg.to_dict()
    if (key := config_mismatch(saved, current)) is not None:
        raise ConfigError(
            "resume_from_checkpoint",
            f"the checkpoint was written with {key}={saved[key]!r}, "
            f"this config has {current[key]!r}; allowed: the same config",
        )


def config_mismatch(saved: dict, current: dict):
    """The first key where a checkpoint's config (`saved`) and a run's config differ, but the keys a
    resumed run may change; None when it can resume that run."""
    return next(
        (
            key
            for key, value in saved.items()
            if key not in _RESUME_MAY_DIFFER and key in current and current[key] != value
        ),
        None,
    )


def config_digest(config: dict, keys: list[str]) -> str:
    """SHA-256 of a run's config over `keys` (a checkpoint writes it with the keys of its run's
    config but the ones a resumed run may change): a resume compares it with its own config, so a
    checkpoint whose config.yaml was edited after it was written is refused, where the two files'
    agreement alone would pass it."""
    values = {k: config.get(k) for k in sorted(keys)}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def digest_keys(config: dict) -> list[str]:
    return sorted(k for k in config if k not in _RESUME_MAY_DIFFER)
