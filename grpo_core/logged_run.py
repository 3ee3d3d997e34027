"""One training run with its own MLflow run: the one function that `grpo train`, `grpo_lab.train`
and every trial of a sweep go through, so a run is recorded the same way whoever started it: every
config value as a param, the curves step by step, the summary and the final status (finished,
failed or killed), and a figure when the caller has one."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from grpo_core.config.schema import GRPOConfig


class LazyLogger:
    """Creates the MLflow run at the first logged step, i.e. only once training really started. A
    store that fails then (a server gone away) does not stop the run: the run folder is its record,
    and the failure is reported when the run ends (grpo_core/run.py: RecordIncomplete)."""

    def __init__(self, kwargs: dict):
        self.kwargs, self.inner, self.error = kwargs, None, None

    @property
    def run_id(self):
        """The MLflow run's id (creating it: the run folder records it when training starts)."""
        inner = self._get()
        return None if inner is None else inner.run_id

    @property
    def ended(self) -> bool:
        return self.inner is None or self.inner.ended

    def _get(self):
        if self.inner is None and self.error is None:
            from grpo_core.mlflow_logging import MlflowRunLogger

            try:
                self.inner = MlflowRunLogger(**self.kwargs)
            except Exception as exc:
                self.error = exc
        return self.inner

    def log_step(self, metrics: dict) -> None:
        if (inner := self._get()) is not None:
            inner.log_step(metrics)

    def end(self, summary: dict, status: str, run_dir) -> None:
        if (inner := self._get()) is not None:
            inner.end(summary, status, run_dir)
        if self.error is not None:
            raise self.error


class _StepHook:
    """The run's logger, plus a call after every step with its metrics (a sweep's progress line, a
    search's pruner)."""

    def __init__(self, inner, on_step: Callable[[dict], None]):
        self.inner, self.on_step = inner, on_step

    @property
    def run_id(self):
        return self.inner.run_id

    def log_step(self, metrics: dict) -> None:
        self.inner.log_step(metrics)
        self.on_step(metrics)

    def end(self, summary: dict, status: str, run_dir) -> None:
        self.inner.end(summary, status, run_dir)


def train_logged(
    cfg: GRPOConfig,
    out_dir: str | Path,
    *,
    tracking_uri: Optional[str] = None,
    experiment: Optional[str] = None,
    run_name: Optional[str] = None,
    tags: Optional[dict] = None,
    parent_run_id: Optional[str] = None,
    create_now: bool = False,
    on_run: Optional[Callable[[str], None]] = None,
    on_step: Optional[Callable[[dict], None]] = None,
    figure: Optional[Callable[[Path, dict], Path]] = None,
    progress: bool = False,
    allow_existing: bool = False,
) -> tuple[dict, Optional[str]]:
    """Train `cfg` into `out_dir` with its own MLflow run; returns (summary, MLflow run id).

    The store and experiment are cfg's unless given (a sweep records its trials in its own).
    `create_now`: create the MLflow run before the model loads and call `on_run(run_id)` at once (a
    sweep's trial records the id, so that the run can be ended as KILLED if its worker dies; a
    failure before training ends it as failed). Otherwise the run is created at the first step, so
    a run that never starts leaves nothing in the store. `on_step(metrics)` is called after every
    step; a RunPruned it raises stops the run, recorded as pruned.
    `figure(out_dir, summary)` draws a figure into the run folder, logged as the run's artifact.
    RecordIncomplete (trained, but the store failed) is raised as run_training raises it."""
    from grpo_core.run import run_training

    out_dir = Path(out_dir)
    kwargs = dict(
        tracking_uri=tracking_uri or cfg.mlflow_tracking_uri,
        experiment=experiment or cfg.mlflow_experiment,
        run_name=run_name or cfg.run_name or cfg.default_run_name(),
        params=cfg.to_dict(),
        tags=tags,
        parent_run_id=parent_run_id,
        run_dir=out_dir,
    )
    if create_now:
        from grpo_core.mlflow_logging import MlflowRunLogger

        logger = MlflowRunLogger(**kwargs)
    else:
        logger = LazyLogger(kwargs)
    try:
        if create_now and on_run is not None:  # (a stop while it records the id ends the run as below)
            on_run(logger.run_id)
        summary = run_training(
            cfg,
            out_dir,
            logger=logger if on_step is None else _StepHook(logger, on_step),
            progress=progress,
            allow_existing=allow_existing,
        )
    except BaseException as exc:
        from grpo_core.util.errors import RecordIncomplete, ended_record, release_frames

        release_frames(exc)  # a read from the store it interrupted would hold SQLite's lock against the record
        if not isinstance(exc, RecordIncomplete) and not logger.ended:  # failed before training started
            logger.end(*ended_record(exc), None)
        raise
    inner = logger.inner if isinstance(logger, LazyLogger) else logger
    if figure is not None and inner is not None:
        png = figure(out_dir, summary)
        try:
            inner.client.log_artifact(inner.run_id, str(png))
        except Exception as exc:  # the store went away after the run was recorded: the figure is in the run folder
            summary = {**summary, "record_error": f"{Path(png).name} not logged to MLflow: {type(exc).__name__}"}
    return summary, None if inner is None else inner.run_id
