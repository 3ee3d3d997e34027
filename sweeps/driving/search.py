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
from pathlib import Path

from grpo_core.mlflow_logging import MlflowRunLogger
from grpo_core.util.errors import RunPruned

from .claims import make_grid_sampler
from ..spec import SweepSpec
from .trial_run import WorkerContext, run_extras, run_logged, run_name


def make_sampler(spec: SweepSpec, worker_index: int = 0):
    import optuna

    if spec.mode == "grid":
        return make_grid_sampler(spec)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=worker_index)
    return optuna.samplers.TPESampler(seed=worker_index)


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
        recent = self.rewards[-self.window:]
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
    trial_logger = MlflowRunLogger(ctx.tracking_uri, spec.experiment, run_name(spec, trial.number, params),
                                   trial_params, tags=tags, parent_run_id=ctx.parent_run_id)
    trial.set_user_attr("mlflow_run_id", trial_logger.run_id)
    values: dict[str, list[float]] = {name: [] for name in spec.all_objectives}
    learned, train_s = [], 0.0
    sign = -1.0 if spec.direction == "minimize" else 1.0
    try:
        for index, seed in enumerate(spec.seeds):
            cfg = spec.config_for({**params, "seed": seed}, **extras)
            out = Path(ctx.out_root) / spec.name / f"trial-{trial.number:04d}" / f"seed-{seed}"
            hook = PruneCheck(trial, cfg.stl_window, index * cfg.max_steps, sign, on_step) if spec.pruner else on_step
            summary, _ = run_logged(cfg, spec, ctx, run_name(spec, trial.number, {**params, "seed": seed}),
                                    {**tags, "seed": seed}, trial_logger.run_id, out, on_step=hook)
            for name in spec.all_objectives:
                values[name].append(spec.censor(summary, cfg.max_steps, name))
            learned.append(summary.get("learned", 0))
            train_s += float(summary.get("train_time_s") or 0.0)
    except RunPruned as exc:
        trial.set_user_attr("error", str(exc))
        trial.set_user_attr("seeds_run", len(learned) + 1)
        trial_logger.end({"pruned_after_step": exc.step, "prune_reason": str(exc)}, "pruned", None)
        raise optuna.TrialPruned(str(exc)) from None
    except BaseException as exc:
        status = "killed" if isinstance(exc, KeyboardInterrupt) else "failed"
        trial_logger.end({"error": f"{type(exc).__name__}: {exc}"}, status, None)
        raise
    means = {name: sum(v) / len(v) for name, v in values.items()}
    trial.set_user_attr("seed_values", values[spec.objective])
    if len(spec.all_objectives) > 1:
        trial.set_user_attr("seed_values_by_objective", values)
    trial.set_user_attr("train_time_s", train_s)
    trial_logger.end({"objective": means[spec.objective], **{f"{k}_mean": v for k, v in means.items()},
                      "learned_fraction": sum(learned) / len(learned), "train_time_s": train_s}, "finished", None)
    if len(spec.all_objectives) > 1:
        return tuple(means[name] for name in spec.all_objectives)
    return means[spec.objective]


def undefined(value) -> bool:
    """A trial value Optuna cannot take (NaN, in any of several objectives)."""
    return any(math.isnan(v) for v in (value if isinstance(value, tuple) else (value,)))
