"""The sweep driver: an Optuna study per sweep, N worker processes, an MLflow run per trial.

Grid mode: `GridSampler` over the grid axes plus `seed`. Trial numbers are allocated atomically
by the storage and GridSampler maps trial number k < grid size to grid point k, so the first pass
never runs a point twice, even from several machines. A global cap, checked under a host lock
before each trial is created, stops workers once every point is complete or running; points
whose trial failed in an earlier invocation are re-enqueued with fixed params on a rerun.
Search mode: TPE (or random) over `search`, seeds inside the objective (mean over seeds), a cap
of `n_trials` trials in the study.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import os
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from filelock import FileLock

from grpo_core.util import defaults
from grpo_core.util.cpu_math import check_process
from grpo_core.util.errors import Terminated, UserInputError, handle_sigterm, mask_secrets
from grpo_core.mlflow_logging import (MlflowRunLogger, check_tracking_uri, get_or_create_experiment,
                                      git_commit, make_client)
from grpo_core.record.provenance import owner_id, usable_cpus
from grpo_core.util.files import check_writable_folder

from .adopt import adopt_run_folders, free_folder, has_adopted, share_sibling_runs
from .progress import SweepProgress
from .report_inputs import validate_report
from .recovery import Heartbeat, end_orphaned_runs, fail_stale
from .spec import SweepSpec, grid_point_of, grid_space, load_spec, point_key
from .storage import (check_distinct, check_storage, claim_lock_path, describe_storage, journal_path,
                      open_storage, repair_journal_tail)


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


# ---- grid bookkeeping ----------------------------------------------------------------------
def make_grid_sampler(spec: SweepSpec):
    import optuna

    class SweepGridSampler(optuna.samplers.GridSampler):
        """GridSampler that leaves stopping to the driver's cap: the stock after_trial calls
        study.stop(), valid only inside optimize()."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return SweepGridSampler(grid_space(spec), seed=0)  # same seed in every process: same order


def _claimed_point(spec: SweepSpec, trial) -> Optional[dict]:
    """grid_point_of, or for an enqueued trial not yet suggested the point it was enqueued with."""
    fixed = trial.system_attrs.get("fixed_params") or {}
    return grid_point_of(spec, trial) or (dict(fixed) if set(fixed) == set(grid_space(spec)) else None)


def free_points(spec: SweepSpec, trials, invocation: str) -> list[dict]:
    """Grid points with no COMPLETE or RUNNING trial, and no failure in this invocation."""
    from optuna.trial import TrialState

    taken = set()
    for t in trials:
        point = _claimed_point(spec, t)
        if point is None or t.state == TrialState.WAITING:  # free until asked for: the next ask runs it
            continue
        if t.state in (TrialState.COMPLETE, TrialState.RUNNING):
            taken.add(point_key(point))
        elif t.user_attrs.get("invocation") == invocation:  # failed just now: retry on a rerun
            taken.add(point_key(point))
    return [p for p in spec.grid_points() if point_key(p) not in taken]


SETTLE_S = 10.0  # how long a claim waits for trials other machines have just asked for to show their point
DUPLICATE = "its grid point was claimed at the same moment by trial {} (another machine); not run"


def claim_trial(study, storage, spec: SweepSpec, lock_path: Path, invocation: str):
    """Create the next trial, or None when the sweep has nothing left for this invocation.
    Trials of dead workers are failed first (sweeps/recovery.py); each new trial records its
    owner process, so that its own death can be detected. A grid trial past the first pass that
    finds its point claimed by an earlier trial (two machines at once: the lock is per host) is
    ended as PRUNED, saying so, and the claim starts over."""
    from optuna.trial import TrialState

    while True:
        trial = _claim_once(study, storage, spec, lock_path, invocation)
        if trial is None or spec.mode != "grid" or (trial.number < len(spec.grid_points())
                                                    and not has_adopted(study.get_trials(deepcopy=False))):
            return trial  # first-pass trials run the point of their trial number, which is unique
        first = earlier_claim(study, spec, trial.number, grid_point_of(spec, trial))
        if first is None:
            return trial
        trial.set_user_attr("error", DUPLICATE.format(first))
        study.tell(trial, state=TrialState.PRUNED)


def earlier_claim(study, spec: SweepSpec, number: int, point: dict) -> Optional[int]:
    """The number of a live trial (complete, running or waiting) before trial `number` on `point`,
    or None. A trial another machine has just asked for shows its point once that machine has
    suggested its params, milliseconds later: such trials are read again until they show it, for
    at most SETTLE_S (a worker that died in between never shows it)."""
    from optuna.trial import TrialState

    live = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
    deadline = time.monotonic() + SETTLE_S
    while True:
        earlier = [t for t in study.get_trials(deepcopy=False, states=live) if t.number < number]
        points = [(t.number, _claimed_point(spec, t)) for t in earlier]
        same = [n for n, p in points if p is not None and point_key(p) == point_key(point)]
        if same:
            return same[0]
        if all(p is not None for _, p in points) or time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _claim_once(study, storage, spec: SweepSpec, lock_path: Path, invocation: str):
    with FileLock(lock_path):
        fail_stale(study, storage)
        trials = study.get_trials(deepcopy=False)
        if spec.mode == "search":
            if len(trials) >= spec.n_trials:
                return None
        else:
            free = free_points(spec, trials, invocation)
            if not free:
                return None
            waiting = any(t.state.name == "WAITING" for t in trials)  # e.g. a heartbeat retry
            if (len(trials) >= len(spec.grid_points()) or has_adopted(trials)) and not waiting:
                study.enqueue_trial(free[0])  # past the first pass, or beside adopted folders: fix the point
        with warnings.catch_warnings():  # "heartbeat is supposed to be used with optimize": we beat ourselves
            warnings.simplefilter("ignore", UserWarning)
            trial = study.ask()
        if spec.mode == "grid":  # its point, recorded as params while no other worker of this host can claim
            for name, choices in grid_space(spec).items():
                trial.suggest_categorical(name, choices)
        trial.set_user_attr("owner", owner_id())
        return trial


def has_work(study, spec: SweepSpec, invocation: str) -> bool:
    trials = study.get_trials(deepcopy=False)
    if spec.mode == "search":
        return len(trials) < spec.n_trials
    return bool(free_points(spec, trials, invocation))


# ---- one trial ----------------------------------------------------------------------------------
def _run_extras(spec: SweepSpec, ctx: WorkerContext) -> dict:
    extras = {"mlflow_tracking_uri": ctx.tracking_uri, "mlflow_experiment": spec.experiment}
    if "num_threads" not in spec.base and "num_threads" not in spec.grid and "num_threads" not in spec.search:
        extras["num_threads"] = ctx.num_threads
    return extras


def _run_name(spec: SweepSpec, number: int, point: dict) -> str:
    parts = [f"{k}={v}" for k, v in point.items() if k != "seed"]
    seed = f"-seed{point['seed']}" if "seed" in point else ""
    return f"{spec.name}-t{number}-{','.join(parts)}{seed}"


def run_logged(cfg, spec: SweepSpec, ctx: WorkerContext, run_name: str, tags: dict, parent_run_id: str,
               out_dir: Path, on_run=None, on_step=None) -> tuple[dict, str]:
    """One trial's run, recorded as every run is (grpo_core/logged_run.py), as a child of
    `parent_run_id` in the sweep's store and experiment, with its reward curve; returns (summary,
    run id). The MLflow run exists before the model loads: `on_run(run_id)` records it in the trial,
    so that the run can be ended as KILLED if this process dies. A run that trained to the end but
    whose MLflow record failed stands, with `record_error` (the record is repaired later)."""
    from grpo_core.util.errors import RecordIncomplete
    from grpo_core.logged_run import train_logged
    from grpo_core.run import read_metrics

    from .plots import reward_curve_png

    def figure(folder: Path, summary: dict) -> Path:
        return reward_curve_png(read_metrics(folder / "metrics.jsonl"), summary.get("baseline_reward"),
                                cfg.stl_window, folder / "reward_curve.png")

    run_ids = []

    def created(run_id: str) -> None:
        run_ids.append(run_id)
        if on_run is not None:
            on_run(run_id)

    try:
        return train_logged(cfg, out_dir, tracking_uri=ctx.tracking_uri, experiment=spec.experiment,
                            run_name=run_name, tags=tags, parent_run_id=parent_run_id, create_now=True,
                            on_run=created, on_step=on_step, figure=figure)
    except RecordIncomplete as exc:  # trained to the end: the result stands; MLflow's record is repaired later
        print(f"grpo sweep: {exc}", file=sys.stderr, flush=True)
        return {**exc.summary, "record_error": str(exc)}, run_ids[0]


def grid_objective(trial, spec: SweepSpec, ctx: WorkerContext, on_step=None) -> float:
    point = {axis: trial.suggest_categorical(axis, values) for axis, values in grid_space(spec).items()}
    cfg = spec.config_for(point, **_run_extras(spec, ctx))
    tags = {"sweep": spec.name, "trial_number": trial.number, "seed": point["seed"],
            **{f"variant.{k}": v for k, v in point.items() if k != "seed"}}
    if "claim" in spec.text:
        tags["claim"] = spec.text["claim"]
    if spec.replication_seeds:  # the report tests each set on its own
        tags["seed_set"] = "replication" if point["seed"] in spec.replication_seeds else "discovery"
    out = free_folder(Path(ctx.out_root) / spec.name, trial.number, ctx.invocation)
    trial.set_user_attr("run_dir", str(out))
    summary, run_id = run_logged(cfg, spec, ctx, _run_name(spec, trial.number, point), tags, ctx.parent_run_id, out,
                                 on_run=lambda rid: trial.set_user_attr("mlflow_run_id", rid), on_step=on_step)
    for key in ("steps_to_learn", "learned", "loss_departure_step", "final_reward", "baseline_reward",
                "record_error"):
        if key in summary:
            trial.set_user_attr(key, summary[key])
    return spec.censor(summary, cfg.max_steps)


def _suggest(trial, key: str, entry: dict):
    if "choices" in entry:
        return trial.suggest_categorical(key, entry["choices"])
    if entry["type"] == "int":
        return trial.suggest_int(key, entry["low"], entry["high"], log=entry["log"])
    return trial.suggest_float(key, entry["low"], entry["high"], log=entry["log"])


def search_objective(trial, spec: SweepSpec, ctx: WorkerContext, on_step=None) -> float:
    """Seeds stay inside the objective: the value is the mean over seeds, never a searched knob."""
    params = {axis: trial.suggest_categorical(axis, values) for axis, values in spec.grid.items()}
    params.update({key: _suggest(trial, key, entry) for key, entry in spec.search.items()})
    extras = _run_extras(spec, ctx)
    first = spec.config_for({**params, "seed": spec.seeds[0]}, **extras)
    trial_params = {k: v for k, v in first.to_dict().items() if k != "seed"}
    trial_params["seeds"] = spec.seeds
    tags = {"sweep": spec.name, "trial_number": trial.number, **{f"variant.{k}": v for k, v in params.items()}}
    trial_logger = MlflowRunLogger(ctx.tracking_uri, spec.experiment, _run_name(spec, trial.number, params),
                                   trial_params, tags=tags, parent_run_id=ctx.parent_run_id)
    trial.set_user_attr("mlflow_run_id", trial_logger.run_id)
    values, learned = [], []
    try:
        for seed in spec.seeds:
            cfg = spec.config_for({**params, "seed": seed}, **extras)
            out = Path(ctx.out_root) / spec.name / f"trial-{trial.number:04d}" / f"seed-{seed}"
            summary, _ = run_logged(cfg, spec, ctx, _run_name(spec, trial.number, {**params, "seed": seed}),
                                    {**tags, "seed": seed}, trial_logger.run_id, out, on_step=on_step)
            values.append(spec.censor(summary, cfg.max_steps))
            learned.append(summary.get("learned", 0))
    except BaseException as exc:
        status = "killed" if isinstance(exc, KeyboardInterrupt) else "failed"
        trial_logger.end({"error": f"{type(exc).__name__}: {exc}"}, status, None)
        raise
    mean = sum(values) / len(values)
    trial.set_user_attr("seed_values", values)
    trial.set_user_attr("mlflow_run_id", trial_logger.run_id)
    trial_logger.end({"objective": mean, f"{spec.objective}_mean": mean,
                      "learned_fraction": sum(learned) / len(learned)}, "finished", None)
    return mean


# ---- workers ----------------------------------------------------------------------------------
def make_sampler(spec: SweepSpec, worker_index: int = 0):
    import optuna

    if spec.mode == "grid":
        return make_grid_sampler(spec)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=worker_index)
    return optuna.samplers.TPESampler(seed=worker_index)


def worker_loop(ctx: WorkerContext, progress=None) -> None:
    """Claim and run trials until the sweep has none left. A trial that raises is FAIL in Optuna
    (FAILED in MLflow) and the worker goes on; Ctrl-C marks the trial FAIL and stops. `progress`
    (a SweepProgress, when this process is the sweep's only worker) is shown between steps."""
    if ctx.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ctx.gpu
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_spec(ctx.spec_path)
    storage = open_storage(ctx.storage_url, ctx.heartbeat_interval)
    study = optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec, ctx.worker_index))
    lock = claim_lock_path(ctx.storage_url, spec.name)
    objective = grid_objective if spec.mode == "grid" else search_objective
    on_step = None if progress is None else progress.poll
    while (trial := claim_trial(study, storage, spec, lock, ctx.invocation)) is not None:
        trial.set_user_attr("invocation", ctx.invocation)
        try:
            with Heartbeat(storage, study, trial):
                value = objective(trial, spec, ctx, on_step)
        except KeyboardInterrupt as exc:
            trial.set_user_attr("error", "interrupted (SIGTERM)" if isinstance(exc, Terminated) else "interrupted")
            study.tell(trial, state=TrialState.FAIL)
            raise
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}".splitlines()[0]
            trial.set_user_attr("error", message)
            study.tell(trial, state=TrialState.FAIL)
            print(f"grpo sweep: trial {trial.number} failed: {message}", file=sys.stderr, flush=True)
            continue
        if math.isnan(value):
            trial.set_user_attr("error", f"objective {spec.objective} is not defined for this run")
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)
        if progress is not None:
            progress.poll(force=True)


def _worker_entry(ctx: WorkerContext) -> None:
    handle_sigterm()  # spawned workers start without the parent's handler
    try:
        worker_loop(ctx)
    except KeyboardInterrupt as exc:
        sys.exit(143 if isinstance(exc, Terminated) else 130)


# ---- the sweep ------------------------------------------------------------------------------------
def spec_fingerprint(spec: SweepSpec) -> str:
    key = json.dumps([spec.base, spec.grid, spec.grid_seeds, spec.search, spec.objective, spec.direction,
                      spec.sampler, spec.n_trials], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _build_tiny_models(keys: list) -> None:
    from grpo_core.tasks.models import ensure_tiny_model

    for key in keys:
        ensure_tiny_model(*key)


def _prepare_models(spec: SweepSpec, in_child: bool) -> list[str]:
    """Build the tiny base models once, before workers start, instead of in every worker.
    With `in_child`, missing models are built in a spawned process, so that this process never
    runs a multi-threaded torch op before forking workers (GNU OpenMP is not fork-safe).
    Returns the model folders."""
    from grpo_core.tasks.models import committed_base, resolve_model_path, tiny_cache_dir

    configs = [spec.config_for(p) for p in spec.grid_points()] if spec.mode == "grid" else [spec.config_for({})]
    keys = sorted({(c.cache_dir, c.task, c.tiny_pretrain_steps) for c in configs if c.model == "tiny"})
    committed = {k: resolve_model_path("tiny", *k) for k in keys if committed_base(k[1], k[2]) is not None}
    keys = [k for k in keys if k not in committed]
    missing = [k for k in keys if not (tiny_cache_dir(*k) / "config.json").is_file()]
    if missing and in_child:
        proc = mp.get_context("spawn").Process(target=_build_tiny_models, args=(missing,), name="grpo-pretrain")
        proc.start()
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"building the tiny base model failed (exit code {proc.exitcode})")
    elif missing:
        _build_tiny_models(missing)
    return ([*committed.values()] + [str(tiny_cache_dir(*k)) for k in keys]
            + [c.model for c in configs if c.model != "tiny"])


def _start_method(gpus: int) -> str:
    """fork on Linux without GPUs: workers inherit the libraries this process has imported
    (a spawned worker imports torch, transformers, MLflow and Optuna again: seconds each).
    spawn with GPUs (CUDA is not fork-safe) and on other systems."""
    if gpus == 0 and sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods():
        return "fork"
    return "spawn"


def _preload_for_fork(model_dirs: list[str]) -> None:
    """Import, before forking, what every worker imports: the trainer, the MLflow logger and the
    transformers modeling module of each model (imported only, no torch op runs)."""
    import grpo_core.run  # noqa: F401
    import grpo_core.trainer  # noqa: F401
    import grpo_core.mlflow_logging  # noqa: F401
    import grpo_core.logged_run  # noqa: F401

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    for path in model_dirs:
        try:
            config = transformers.AutoConfig.from_pretrained(path)
            getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type])  # imports its module
        except Exception:  # a hub id or an unknown architecture: the worker imports it itself
            pass


def _release_connections(storage) -> None:
    """Close the Optuna storage's pooled database connections before forking, so no worker shares
    one (SQLAlchemy: a connection must not cross a fork); the pool reconnects on next use. MLflow
    keeps none in this process (MLFLOW_SQLALCHEMYSTORE_POOLCLASS=NullPool, set by run_sweep)."""
    engine = getattr(storage, "engine", None)  # RDBStorage.engine; the journal storage has none
    if engine is not None:
        engine.dispose()


def _parent_run(study, spec: SweepSpec, tracking_uri: str) -> str:
    """The sweep's MLflow parent run: reused on every rerun (its id is kept in the study)."""
    client = make_client(tracking_uri)
    run_id = study.user_attrs.get(f"mlflow_parent_run_id:{mask_secrets(tracking_uri)}")
    if run_id:
        try:
            client.update_run(run_id, status="RUNNING")
            client.set_tag(run_id, "owner", owner_id())  # this process now: `grpo recover` ends it if it dies
            return run_id
        except Exception:  # deleted, or another store: make a new one
            pass
    experiment_id = get_or_create_experiment(client, spec.experiment, tracking_uri)
    tags = {"sweep": spec.name, "sweep_role": "parent", "git_commit": git_commit(), "spec_path": spec.path,
            "mode": spec.mode, "owner": owner_id(), **{k: v[:5000] for k, v in spec.text.items()}}
    run = client.create_run(experiment_id, run_name=spec.name, tags=tags)
    client.log_param(run.info.run_id, "objective", spec.objective)
    client.log_param(run.info.run_id, "direction", spec.direction)
    client.log_param(run.info.run_id, "grid", json.dumps(spec.grid)[:6000])
    client.log_param(run.info.run_id, "search", json.dumps(spec.search)[:6000])
    client.log_param(run.info.run_id, "seeds", json.dumps(spec.seeds))
    if spec.replication_seeds:
        client.log_param(run.info.run_id, "replication_seeds", json.dumps(spec.replication_seeds))
    client.log_param(run.info.run_id, "base", mask_secrets(json.dumps(spec.base, default=str))[:6000])
    study.set_user_attr(f"mlflow_parent_run_id:{mask_secrets(tracking_uri)}", run.info.run_id)
    return run.info.run_id


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def run_sweep(spec_path: str, workers: int = 1, storage_url: Optional[str] = None,
              tracking_uri: Optional[str] = None, out_root: str = defaults.SWEEPS,
              heartbeat_interval: int = 30) -> int:
    """Run or resume a sweep. Every input is checked before anything is written."""
    import optuna
    from optuna.trial import TrialState

    if workers < 1:
        raise UserInputError(f"--workers: got {workers}; allowed: an integer ≥ 1")
    if Path(out_root).exists() and not Path(out_root).is_dir():
        raise UserInputError(f"--out-root {out_root}: is a file; allowed: a folder for the trial run folders")
    if heartbeat_interval < 1:
        raise UserInputError(f"--heartbeat-interval: got {heartbeat_interval}; allowed: an integer ≥ 1 (seconds)")
    spec = load_spec(spec_path)
    validate_report(spec, claim=False)
    check_process(spec.config_for({}).cpu_math)  # the workers compute with this process's CPU math
    tracking_uri = tracking_uri or defaults.TRACKING_URI
    # MLflow's documented setting: no pooled SQL connections in this process, so none is open when
    # the workers fork (a connection must not cross a fork); each operation opens its own
    os.environ.setdefault("MLFLOW_SQLALCHEMYSTORE_POOLCLASS", "NullPool")
    check_distinct(storage_url, tracking_uri)
    check_tracking_uri(tracking_uri)
    check_storage(storage_url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_writable_folder(out_root, "--out-root")
    journal = journal_path(storage_url)
    fresh_journal = journal is not None and not journal.exists()
    if cut := repair_journal_tail(storage_url):
        print(f"grpo sweep: {describe_storage(storage_url)}: its last record was cut off (a writer died mid-write); "
              f"removed those {cut} bytes before appending", file=sys.stderr, flush=True)
    try:
        storage = open_storage(storage_url, heartbeat_interval)
        study = _open_study(spec, storage, storage_url)
    except OSError as exc:  # a full disk under the journal: one line, and no empty journal left behind
        if fresh_journal and journal.is_file() and journal.stat().st_size == 0:
            journal.unlink()
            Path(str(journal) + ".lock").unlink(missing_ok=True)
        raise UserInputError(f"--storage {describe_storage(storage_url)}: cannot write the sweep's study there "
                             f"({exc.strerror or exc}); allowed: a journal file on a disk with free space") from None
    _recover(study, storage, tracking_uri, storage_url)
    if shared := share_sibling_runs(out_root, spec):
        print(f"sweep {spec.name}: {len(shared)} finished run(s) of other sweeps in {out_root} are this sweep's runs "
              f"(the same config and seed), copied in as trial-shared-*, not trained again", flush=True)
    if adopted := adopt_run_folders(study, spec, out_root):
        print(f"sweep {spec.name}: {adopted} finished run folder(s) in {Path(out_root) / spec.name} taken as done "
              f"(the study did not know them); only the points without one are trained", flush=True)
    invocation = uuid.uuid4().hex[:12]
    if not has_work(study, spec, invocation):
        print(f"sweep {spec.name}: nothing to run; every trial is already done")
        print(trials_table(study, spec))
        return 0

    gpus = _gpu_count()
    method = _start_method(gpus) if workers > 1 else None
    model_dirs = _prepare_models(spec, in_child=method == "fork")
    parent_run_id = _parent_run(study, spec, tracking_uri)
    base_ctx = WorkerContext(spec_path=str(spec.path), storage_url=storage_url, tracking_uri=tracking_uri,
                             parent_run_id=parent_run_id, invocation=invocation, heartbeat_interval=heartbeat_interval,
                             num_threads=max(1, usable_cpus() // workers) if not gpus else 0, out_root=out_root)
    started = time.perf_counter()
    status, procs = "FINISHED", []
    progress = SweepProgress(spec, study, invocation, workers)
    try:
        if workers == 1:
            worker_loop(replace(base_ctx, gpu="0" if gpus else None), progress)
        else:
            if method == "fork":
                _preload_for_fork(model_dirs)
                _release_connections(storage)
            context = mp.get_context(method)
            procs = [context.Process(target=_worker_entry, name=f"grpo-sweep-worker-{i}",
                                   args=(replace(base_ctx, worker_index=i, gpu=str(i % gpus) if gpus else None),))
                     for i in range(min(workers, _most_trials(spec)))]
            for p in procs:
                p.start()
            progress.start_thread()  # after the forks: no thread of this process crosses one
            for p in procs:
                p.join()
    except KeyboardInterrupt as exc:
        status = "KILLED"
        if isinstance(exc, Terminated):  # Ctrl-C reaches the workers itself; SIGTERM went to this process
            for p in procs:
                if p.is_alive():
                    p.terminate()
        for p in procs:  # each records its trial as failed and its run as killed first
            p.join()
        print("grpo sweep: interrupted; run the same command again to resume", file=sys.stderr)
        raise
    finally:
        progress.close()
        client = make_client(tracking_uri)
        client.set_tag(parent_run_id, "wall_time_s", f"{time.perf_counter() - started:.1f}")
        client.set_terminated(parent_run_id, status=status)
    wall = time.perf_counter() - started
    study = optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec))
    _recover(study, storage, tracking_uri, storage_url)  # a worker of this sweep that was killed
    print(trials_table(study, spec))
    failed = [t for t in study.get_trials(deepcopy=False)
              if t.state == TrialState.FAIL and t.user_attrs.get("invocation") == invocation]
    started_workers = len(procs) or 1
    print(f"sweep {spec.name}: {started_workers} worker(s)"
          + (f" (of --workers {workers}: no more trials to share; {base_ctx.num_threads} thread(s) each, as for "
             f"{workers})" if started_workers < workers else "") + f", {wall:.1f}s wall; "
          f"{len(failed)} trial(s) failed in this run" + (" (rerun to retry them)" if failed else ""))
    print(ui_line(tracking_uri, parent_run_id, spec.name))
    return 1 if failed else 0


def _most_trials(spec: SweepSpec) -> int:
    """The most trials a sweep can run at once: its grid's runs, or a search's budget (times its grid
    points). A worker beyond them would never get one; the thread count per run still comes from
    --workers (it is part of a run's numbers)."""
    if spec.mode == "grid":
        return len(spec.grid_points())
    return spec.n_trials * math.prod(len(v) for v in spec.grid.values())


def ui_line(tracking_uri: str, parent_run_id: str, name: str) -> str:
    """Where to see the sweep's comparison: the address of its view in the MLflow UI."""
    from urllib.parse import urlsplit, urlunsplit

    from .ui_view import describe_links, sweep_links

    served = tracking_uri.startswith(("http://", "https://"))
    parts = urlsplit(tracking_uri)  # a tracking server serves the UI itself (its address without credentials)
    base = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1])) if served else "http://127.0.0.1:5000"
    try:
        client = make_client(tracking_uri)
        links = sweep_links(client, client.get_run(parent_run_id), base)
    except Exception as exc:  # the store went away: the runs are in their folders; `grpo ui` publishes later
        return f"sweep {name}: its MLflow view could not be published ({type(exc).__name__})"
    return describe_links(name, links, "" if served else " (serve it with `grpo ui`)")


def _open_study(spec: SweepSpec, storage, storage_url: Optional[str], wait_s: float = 10.0):
    """The sweep's study, created with its spec's fingerprint, or the existing one when its
    fingerprint matches. Creating is the storage's atomic step (one of two processes creating one name
    gets DuplicatedStudyError), so of two sweeps of one name with different grids, started together
    on any machines, the second is refused: it waits for the first's fingerprint, which the first
    writes right after creating."""
    import optuna

    fingerprint = spec_fingerprint(spec)
    try:
        study = optuna.create_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec),
                                    direction=spec.direction)
        study.set_user_attr("spec_fingerprint", fingerprint)
        return study
    except optuna.exceptions.DuplicatedStudyError:
        pass
    study = optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec))
    deadline = time.monotonic() + wait_s
    while (found := study.user_attrs.get("spec_fingerprint")) is None and time.monotonic() < deadline:
        time.sleep(0.2)  # created a moment ago by another process, which is about to write its fingerprint
        study = optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec))
    if found not in (None, fingerprint):
        raise UserInputError(f"{spec.path}: a sweep named {spec.name!r} already exists in "
                             f"{describe_storage(storage_url)} with a different spec; rename the sweep")
    if found is None:  # a study from before fingerprints, or whose creator died before writing one
        study.set_user_attr("spec_fingerprint", fingerprint)
    return study


def _recover(study, storage, tracking_uri: str, storage_url: Optional[str]) -> None:
    """Fail the trials of dead workers and end their MLflow runs as KILLED; say so."""
    failed = fail_stale(study, storage)
    ended = end_orphaned_runs(study, tracking_uri)
    if failed or ended:
        print(f"grpo sweep: {len(failed)} trial(s) of dead workers failed ({describe_storage(storage_url)}), "
              f"{len(ended)} MLflow run(s) ended as KILLED; their grid points run again", file=sys.stderr, flush=True)


def trials_table(study, spec: SweepSpec) -> str:
    """One line per trial: number, state, params, objective value."""
    names = list(grid_space(spec)) if spec.mode == "grid" else list(spec.grid) + list(spec.search)
    header = ["trial", "state", *names, spec.objective]
    rows = [header]
    for t in study.get_trials(deepcopy=False):
        point = grid_point_of(spec, t) if spec.mode == "grid" else dict(t.params)
        point = point or {}
        value = "" if t.value is None else spec.value_text(t.value, t.user_attrs)
        if t.state.name in ("FAIL", "PRUNED") and t.user_attrs.get("error"):
            value = ("error: " if t.state.name == "FAIL" else "") + str(t.user_attrs["error"])[:60]
        rows.append([str(t.number), t.state.name, *[str(point.get(n, "")) for n in names], value])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def load_sweep_study(spec_path: str | Path, storage_url: Optional[str] = None):
    """A sweep's spec and its study, read only: `grpo trials` and grpo_lab.trials. A store that is
    missing, is not one, or holds no such sweep is a one-line UserInputError; nothing is created."""
    import optuna

    spec = load_spec(spec_path)
    if storage_url is None and not Path(defaults.JOURNAL).exists():
        raise UserInputError(f"{spec.path}: no sweep has run on this machine yet ({defaults.JOURNAL} is missing)")
    check_storage(storage_url, must_exist=True)  # a read-only command creates no database
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=spec.name, storage=open_storage(storage_url),
                                  sampler=make_sampler(spec))
    except KeyError:
        raise UserInputError(f"{spec.path}: no sweep named {spec.name!r} in {describe_storage(storage_url)} "
                             f"yet; run `grpo sweep {spec.path}` first") from None
    return spec, study


def list_trials(spec_path: str, storage_url: Optional[str] = None) -> int:
    spec, study = load_sweep_study(spec_path, storage_url)
    print(trials_table(study, spec))
    return 0
