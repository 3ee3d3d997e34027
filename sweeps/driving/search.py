"""A search's trials: the sampler, the pruner, and the objective that trains one trial's seeds.

A search samples `search` (TPE by default, or random) with the seeds inside the objective: a
trial's value is the mean of its seeds' values (one value per objective: with several, Optuna's
multi-objective TPE keeps their Pareto front). With `pruner`, every step of every seed reports the
run's smoothed reward to Optuna, the steps numbered seed after seed (seed i's step s is
i × max_steps + s), so that trials are compared at the same step of the same seed; the pruner
(median, successive halving or Hyperband) stops a trial whose smoothed reward is behind. The
smoothed reward is the moving average steps_to_learn reads (`stl_window` steps, fewer at the
start), negated when the objective is minimized (Optuna prunes in the study's direction).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from grpo_core.mlflow_logging import MlflowRunLogger
from grpo_core.util.errors import RunPruned, cause_line, ended_record, release_frames

from .claims import make_grid_sampler
from ..spec import SweepSpec
from .trial_run import WorkerContext, resume_or_start, run_extras, run_logged, run_name


RESUME_SEED_STRIDE = 1000  # a resumed search's samplers: seeds past every fresh worker's


def make_sampler(spec: SweepSpec, worker_index: int = 0, trials_before: int = 0):
    """The sweep's sampler for one worker. A search's is seeded by the worker's index and, when the
    study already holds trials (a resumed search), by how many: the seeded sampler would otherwise
    start its sequence again and buy the points of the finished trials a second time. A search
    that runs uninterrupted draws as it always did (trials_before 0)."""
    import optuna

    if spec.mode == "grid":
        return make_grid_sampler(spec)
    seed = worker_index + RESUME_SEED_STRIDE * trials_before
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(spec: SweepSpec):
    """Optuna's pruner for spec.pruner, or NopPruner (grids, and searches without one)."""
    import optuna

    entry = spec.pruner
    if not entry:
        return optuna.pruners.NopPruner()
    warmup, startup = entry["warmup_steps"], entry["startup_trials"]
    if entry["type"] == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=warmup)
    max_resource = spec.config_for({"seed": spec.seeds[0]}).max_steps * len(spec.seeds)
    if entry["type"] == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, warmup), reduction_factor=3)
    return optuna.pruners.HyperbandPruner(min_resource=max(1, warmup), max_resource=max_resource, reduction_factor=3)


class PruneCheck:
    """After each step of a trial's run: report the smoothed reward; raise RunPruned when the
    pruner says so. `offset`: the steps of the trial's earlier seeds."""

    def __init__(self, trial, window: int, offset: int, sign: float, then=None):
        self.trial, self.window, self.offset, self.sign, self.then = trial, window, offset, sign, then
        self.rewards: list[float] = []

    def __call__(self, metrics: dict) -> None:
        if self.then is not None:
            self.then()
        self.rewards.append(float(metrics["reward"]))
        recent = self.rewards[-self.window :]
        smoothed = sum(recent) / len(recent)
        own = int(metrics.get("step", len(self.rewards)))  # the run's step; the trial's counts its earlier seeds
        step = self.offset + own
        self.trial.report(self.sign * smoothed, step)
        if self.trial.should_prune():
            raise RunPruned(own, f"smoothed reward {smoothed:.4g} behind the other trials' at the trial's step {step}")


def suggest(trial, key: str, entry: dict):
    if "choices" in entry:
        return trial.suggest_categorical(key, entry["choices"])
    if entry["type"] == "int":
        return trial.suggest_int(key, entry["low"], entry["high"], log=entry["log"])
    return trial.suggest_float(key, entry["low"], entry["high"], log=entry["log"])


def search_objective(trial, spec: SweepSpec, ctx: WorkerContext, on_step=None):
    """Train the trial's seeds; the mean over seeds of each objective (a float, or a tuple with
    several). Seeds stay inside the objective: never a searched knob. A pruned seed raises
    optuna.TrialPruned after its run and the trial's MLflow run are recorded as pruned."""
    import optuna

    params = {axis: trial.suggest_categorical(axis, values) for axis, values in spec.grid.items()}
    params.update({key: suggest(trial, key, entry) for key, entry in spec.search.items()})
    extras = run_extras(spec, ctx)
    first = spec.config_for({**params, "seed": spec.seeds[0]}, **extras)
    trial_params = {k: v for k, v in first.to_dict().items() if k != "seed"}
    trial_params["seeds"] = spec.seeds
    tags = {"sweep": spec.name, "trial_number": trial.number, **{f"variant.{k}": v for k, v in params.items()}}
    trial_logger = MlflowRunLogger(
        ctx.tracking_uri,
        spec.experiment,
        run_name(spec, trial.number, params),
        trial_params,
        tags={**tags, "sweep_role": "trial"},
        parent_run_id=ctx.parent_run_id,
    )
    trial.set_user_attr("mlflow_run_id", trial_logger.run_id)
    values: dict[str, list[float]] = {name: [] for name in spec.all_objectives}
    learned, train_s, seed_runs = [], 0.0, []  # seed_runs: (seed, its run folder, its MLflow run id)
    sign = -1.0 if spec.direction == "minimize" else 1.0
    try:
        for index, seed in enumerate(spec.seeds):
            out = Path(ctx.out_root) / spec.name / f"trial-{trial.number:04d}" / f"seed-{seed}"
            cfg, out = resume_or_start(spec, {**params, "seed": seed}, extras, ctx, out)
            hook = PruneCheck(trial, cfg.stl_window, index * cfg.max_steps, sign, on_step) if spec.pruner else on_step
            summary, _ = run_logged(
                cfg,
                spec,
                ctx,
                run_name(spec, trial.number, {**params, "seed": seed}),
                {**tags, "seed": seed},
                trial_logger.run_id,
                out,
                on_step=hook,
                on_run=lambda run_id, seed=seed, out=out: seed_runs.append((seed, out, run_id)),
            )
            for name in spec.all_objectives:
                values[name].append(spec.censor(summary, cfg.max_steps, name))
            learned.append(summary.get("learned", 0))
            train_s += float(summary.get("train_time_s") or 0.0)
    except RunPruned as exc:
        trial.set_user_attr("error", str(exc))
        trial.set_user_attr("seeds_run", len(learned) + 1)
        record_trial(trial_logger, seed_runs)
        trial_logger.end({"pruned_after_step": exc.step, "prune_reason": str(exc)}, "pruned", None)
        raise optuna.TrialPruned(str(exc)) from None
    except BaseException as exc:
        release_frames(exc)  # a read from the store it interrupted would hold SQLite's lock against the record
        record_trial(trial_logger, seed_runs)
        trial_logger.end(*ended_record(exc), None)
        raise
    means = {name: sum(v) / len(v) for name, v in values.items()}
    record_trial(trial_logger, seed_runs)  # MLflow first: a trial failed elsewhere meanwhile refuses the attributes
    trial_logger.end(
        {
            "objective": means[spec.objective],
            **{f"{k}_mean": v for k, v in means.items()},
            "learned_fraction": sum(learned) / len(learned),
            "train_time_s": train_s,
        },
        "finished",
        None,
    )
    trial.set_user_attr("seed_values", values[spec.objective])
    if len(spec.all_objectives) > 1:
        trial.set_user_attr("seed_values_by_objective", values)
    trial.set_user_attr("train_time_s", train_s)
    if len(spec.all_objectives) > 1:
        return tuple(means[name] for name in spec.all_objectives)
    return means[spec.objective]


def record_trial(trial_logger, seed_runs: list[tuple[int, Path, str]]) -> None:
    """What the search's MLflow view shows of a trial beyond its summary (sweeps/driving/ui_view.py):
    its reward curve (at each step, the mean reward over the trial's seeds that reached it; a pruned
    seed's curve stops where it was stopped), and as its description the links to its seeds' runs."""
    from mlflow.entities import Metric

    from grpo_core.util.files import read_metrics

    by_step: dict[int, list[float]] = {}
    for _, folder, _ in seed_runs:
        path = Path(folder) / "metrics.jsonl"
        for row in read_metrics(path) if path.is_file() else []:
            if "reward" in row:
                by_step.setdefault(int(row["step"]), []).append(float(row["reward"]))
    stamp = int(time.time() * 1000)
    curve = [Metric("reward", sum(v) / len(v), stamp, step) for step, v in sorted(by_step.items())]
    experiment = trial_logger.experiment_id
    note = "The runs of this trial's seeds:\n\n" + "\n".join(
        f"- seed {seed}: [{run_id}](#/experiments/{experiment}/runs/{run_id}) (folder `{folder}`)"
        for seed, folder, run_id in seed_runs
    )
    try:
        for i in range(0, len(curve), 1000):  # MLflow takes at most 1000 metrics per batch
            trial_logger.client.log_batch(trial_logger.run_id, metrics=curve[i : i + 1000])
        trial_logger.client.set_tag(trial_logger.run_id, "mlflow.note.content", note)
    except Exception as exc:  # the store went away: the trial's result stands, its runs' folders hold the curves
        print(
            f"grpo sweep: the trial's curve and seed links were not logged to MLflow ({cause_line(exc)})",
            file=sys.stderr,
            flush=True,
        )


def undefined(value) -> bool:
    """A trial value Optuna cannot take (NaN, in any of several objectives)."""
    return any(math.isnan(v) for v in (value if isinstance(value, tuple) else (value,)))
