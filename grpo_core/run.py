"""One training run with its run folder: config.yaml before the first step, metrics.jsonl one
line per optimizer step (flushed, so a killed run keeps its steps), summary.json at the end with
`status` finished | failed | killed. Nothing a user ran is lost."""

from __future__ import annotations

import json
import math
import traceback
from pathlib import Path
from typing import Callable, Optional, Protocol

import yaml

from .config import GRPOConfig
from .errors import RunFailure

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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({k: _json_value(v) for k, v in data.items()}, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def read_metrics(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def run_training(
    cfg: GRPOConfig,
    out_dir: str | Path,
    *,
    logger: Optional[RunLogger] = None,
    progress: bool = True,
    reward_funcs: Optional[dict[str, Callable]] = None,
) -> dict:
    """Build the trainer (bad input raises before anything is written), then train and record."""
    from .trainer import GRPOTrainer

    trainer = GRPOTrainer(cfg, reward_funcs=reward_funcs)
    out = Path(out_dir)
    kept = resumed_metrics(cfg)  # the steps up to the checkpoint, when resuming
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    bar = _progress_bar(cfg.max_steps, progress)
    status, summary = "failed", {}
    with open(out / "metrics.jsonl", "w") as metrics_file:
        for line in kept:  # a resumed run's folder and MLflow run hold every step, 1 … max_steps
            metrics_file.write(json.dumps(line) + "\n")
            if logger is not None:
                logger.log_step(line)
        if bar is not None:
            bar.update(len(kept))

        def on_step(metrics: dict) -> None:
            metrics_file.write(json.dumps({k: _json_value(v) for k, v in metrics.items()}) + "\n")
            metrics_file.flush()
            if logger is not None:
                logger.log_step(metrics)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['reward']:.3f}", loss=f"{metrics['loss']:.2e}", refresh=False)

        try:
            summary = trainer.train(on_step=on_step, checkpoint_dir=out)
            status = "finished"
        except RunFailure as exc:
            summary = {"error": str(exc)}
            raise
        except KeyboardInterrupt:
            status, summary = "killed", {"error": "interrupted (KeyboardInterrupt)"}
            raise
        except BaseException as exc:
            summary = {"error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=20)}
            raise
        finally:
            if bar is not None:
                bar.close()
            summary = {"status": status, "steps_completed": trainer.step, **trainer.record, **summary}
            write_json(out / "summary.json", summary)
            if logger is not None:
                logger.end(summary, status, out)
    return summary


def resumed_metrics(cfg: GRPOConfig) -> list[dict]:
    """The metrics.jsonl lines of the checkpoint's run up to the checkpoint's step."""
    if not cfg.resume_from_checkpoint:
        return []
    folder = Path(cfg.resume_from_checkpoint)
    step = int(folder.name.rsplit("-", 1)[-1]) if folder.name.rsplit("-", 1)[-1].isdigit() else None
    source = folder.parent / "metrics.jsonl"
    if step is None or not source.is_file():
        return []
    return [m for m in read_metrics(source) if m.get("step", 0) <= step]


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="grpo", unit="step", dynamic_ncols=True)
