"""One trial's runs: the context a worker process gets, the run's name and extras, and a run
recorded as every run is (grpo_core/logged_run.py) under the sweep's parent run; the grid's
objective (one run per trial). The search's objective (several seeds per trial) is sweeps/driving/search.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from grpo_core.util import defaults

from .adopt import free_folder
from .resume import drop_checkpoints, resumable_checkpoint, step_of
from ..spec import SweepSpec, grid_space


@dataclass(frozen=True)
class WorkerContext:
    """Everything a worker process needs; picklable for the spawn start method."""

    spec_path: str
    storage_url: Optional[str]
    tracking_uri: str
    parent_run_id: str
    invocation: str  # one id per `grpo sweep` call: a point that failed in it is not retried in it
    worker_index: int = 0
    num_threads: int = 0
    gpu: Optional[str] = None
    out_root: str = defaults.SWEEPS
    heartbeat_interval: int = 30  # seconds; RDB storages only
    trials_before: int = (
        0  # the study's trials when this invocation started (a resumed search's samplers: make_sampler)
    )
    start_until: Optional[float] = None  # wall time after which no trial is claimed (--stop-after: time_limit.py)


def place_extras(spec: SweepSpec, tracking_uri: str) -> dict:
    """cache_dir beside the sweep's SQLite store when the spec leaves it at its default and the store
    is given elsewhere (grpo_core/mlflow_store.py: cache_dir_for); nothing otherwise."""
    from grpo_core.mlflow_store import cache_dir_for

    beside = cache_dir_for(tracking_uri)
    return {"cache_dir": beside} if beside and "cache_dir" not in spec.base else {}


def run_extras(spec: SweepSpec, ctx: WorkerContext) -> dict:
    extras = {
        "mlflow_tracking_uri": ctx.tracking_uri,
        "mlflow_experiment": spec.experiment,
        **place_extras(spec, ctx.tracking_uri),
    }
    if "num_threads" not in spec.base and "num_threads" not in spec.grid and "num_threads" not in spec.search:
        extras["num_threads"] = ctx.num_threads
    return extras


def run_name(spec: SweepSpec, number: int, point: dict) -> str:
    parts = [f"{k}={v}" for k, v in point.items() if k != "seed"]
    seed = f"-seed{point['seed']}" if "seed" in point else ""
    return f"{spec.name}-t{number}-{','.join(parts)}{seed}"


def resume_or_start(spec: SweepSpec, point: dict, extras: dict, ctx: WorkerContext, fresh: Path):
    """(config, run folder) of the run a trial trains at `point`: where a stopped run of that very
    config left a checkpoint in the sweep's folder (sweeps/driving/resume.py), that run goes on in
    its own folder from the checkpoint; otherwise a new run in `fresh`."""
    cfg = spec.config_for(point, **extras)
    checkpoint = resumable_checkpoint(Path(ctx.out_root) / spec.name, cfg)
    if checkpoint is None:
        return cfg, fresh
    print(
        f"sweep {spec.name}: {checkpoint.parent.name} goes on from its checkpoint at step "
        f"{step_of(checkpoint)} of {cfg.max_steps}",
        flush=True,
    )
    return spec.config_for(point, **extras, resume_from_checkpoint=str(checkpoint)), checkpoint.parent


def run_logged(
    cfg,
    spec: SweepSpec,
    ctx: WorkerContext,
    run_name: str,
    tags: dict,
    parent_run_id: str,
    out_dir: Path,
    on_run=None,
    on_step=None,
) -> tuple[dict, str]:
    """One trial's run, recorded as every run is (grpo_core/logged_run.py), as a child of
    `parent_run_id` in the sweep's store and experiment, with its reward curve; returns (summary,
    run id). The MLflow run exists before the model loads: `on_run(run_id)` records it in the trial,
    so that the run can be ended as KILLED if this process dies. A run that trained to the end but
    whose MLflow record failed stands, with `record_error` (the record is repaired later). A config
    with resume_from_checkpoint goes on in its checkpoint's folder (`out_dir`); a finished run's
    checkpoints are removed."""
    from grpo_core.util.errors import RecordIncomplete
    from grpo_core.logged_run import train_logged
    from grpo_core.run import read_metrics

    from .plots import reward_curve_png

    def figure(folder: Path, summary: dict) -> Path:
        return reward_curve_png(
            read_metrics(folder / "metrics.jsonl"),
            summary.get("baseline_reward"),
            cfg.stl_window,
            folder / "reward_curve.png",
        )

    run_ids = []

    def created(run_id: str) -> None:
        run_ids.append(run_id)
        if on_run is not None:
            on_run(run_id)

    try:
        done = train_logged(
            cfg,
            out_dir,
            tracking_uri=ctx.tracking_uri,
            experiment=spec.experiment,
            run_name=run_name,
            tags=tags,
            parent_run_id=parent_run_id,
            create_now=True,
            on_run=created,
            on_step=on_step,
            figure=figure,
            allow_existing=bool(cfg.resume_from_checkpoint),
        )
    except RecordIncomplete as exc:  # trained to the end: the result stands; MLflow's record is repaired later
        print(f"grpo sweep: {exc}", file=sys.stderr, flush=True)
        done = {**exc.summary, "record_error": str(exc)}, run_ids[0]
    drop_checkpoints(out_dir)  # finished: they could only resume a run that is done
    return done


def grid_objective(trial, spec: SweepSpec, ctx: WorkerContext, on_step=None) -> float:
    point = {axis: trial.suggest_categorical(axis, values) for axis, values in grid_space(spec).items()}
    out = free_folder(Path(ctx.out_root) / spec.name, trial.number, ctx.invocation)
    cfg, out = resume_or_start(spec, point, run_extras(spec, ctx), ctx, out)
    if cfg.resume_from_checkpoint:
        trial.set_user_attr("resumed_from", cfg.resume_from_checkpoint)
    tags = {
        "sweep": spec.name,
        "trial_number": trial.number,
        "seed": point["seed"],
        **{f"variant.{k}": v for k, v in point.items() if k != "seed"},
    }
    if "claim" in spec.text:
        tags["claim"] = spec.text["claim"]
    if spec.replication_seeds:  # the report tests each set on its own
        tags["seed_set"] = "replication" if point["seed"] in spec.replication_seeds else "discovery"
    trial.set_user_attr("run_dir", str(out))
    summary, run_id = run_logged(
        cfg,
        spec,
        ctx,
        run_name(spec, trial.number, point),
        tags,
        ctx.parent_run_id,
        out,
        on_run=lambda rid: trial.set_user_attr("mlflow_run_id", rid),
        on_step=on_step,
    )
    for key in ("steps_to_learn", "learned", "loss_departure_step", "final_reward", "baseline_reward", "record_error"):
        if key in summary:
            trial.set_user_attr(key, summary[key])
    return spec.censor(summary, cfg.max_steps)
