"""The sweep driver: an Optuna study per sweep, N worker processes, an MLflow run per trial.

Grid mode: `GridSampler` over the grid axes plus `seed`. Trial numbers are allocated atomically
by the storage and GridSampler maps trial number k < grid size to grid point k, so the first pass
never runs a point twice, even from several machines. A global cap, checked under a host lock
before each trial is created, stops workers once every point is complete or running; points
whose trial failed in an earlier invocation are re-enqueued with fixed params on a rerun.
Search mode: TPE (or random) over `search`, seeds inside the objective (mean over seeds), a cap
of `n_trials` trials in the study, an optional pruner and several objectives (sweeps/driving/search.py).
The claims are sweeps/driving/claims.py, one trial's runs sweeps/driving/trial_run.py, the study read back
sweeps/driving/trials.py.
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
from dataclasses import replace
from pathlib import Path
from typing import Optional

from grpo_core.util import defaults
from grpo_core.util.cpu_math import check_process
from grpo_core.util.errors import RunAbandoned, Terminated, UserInputError, handle_sigterm, release_frames
from grpo_core.mlflow_store import check_tracking_uri, make_client
from grpo_core.record.provenance import usable_cpus
from grpo_core.util.files import check_writable_folder

from .adopt import adopt_run_folders, share_sibling_runs
from .claims import claim_trial, has_work, work_left
from .parent_run import parent_run
from .progress import SweepProgress, format_duration
from ..report_spec import validate_report
from .recovery import Heartbeat, end_orphaned_runs, fail_stale, fail_trial, interrupted_reason
from .search import make_pruner, make_sampler, search_objective, undefined
from ..spec import IGNORED, SweepSpec, grid_point_of, load_spec, point_key
from . import time_limit
from .storage import (check_distinct, check_storage, claim_lock_path, describe_storage, journal_path,
                      open_storage, repair_journal_tail)
from .trial_run import WorkerContext, grid_objective, place_extras
from .worker_pool import WorkerPool
from .trials import log_importance, trials_table


# ---- workers ----------------------------------------------------------------------------------
def worker_loop(ctx: WorkerContext, progress=None, stop=None) -> None:
    """Claim and run trials until the sweep has none left. A trial that raises is FAIL in Optuna
    (FAILED in MLflow) and the worker goes on; Ctrl-C marks the trial FAIL and stops. `progress`
    (a SweepProgress, when this process is the sweep's only worker) is shown between steps; `stop`
    (an Event the sweep sets when it is stopped) ends the loop before another claim."""
    if ctx.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ctx.gpu
    import optuna
    from optuna.trial import TrialState

    from grpo_core.run import take_held_sigterm

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_spec(ctx.spec_path)
    storage = open_storage(ctx.storage_url, ctx.heartbeat_interval)
    study = optuna.load_study(study_name=spec.name, storage=storage, pruner=make_pruner(spec),
                              sampler=make_sampler(spec, ctx.worker_index, ctx.trials_before))
    lock = claim_lock_path(ctx.storage_url, spec.name)
    objective = grid_objective if spec.mode == "grid" else search_objective
    on_step = None if progress is None else (lambda *_: progress.poll())
    take_held_sigterm()  # (one held by an earlier sweep in this process is not this one's)

    parent = mp.parent_process()  # a worker process's sweep; None where the sweep runs its only worker itself

    def next_trial():
        # stop before another claim, as on SIGTERM: one held while the last run's record was written, the
        # sweep's own word (set before it sends SIGTERM), or a sweep that died (its parent-death signal aside)
        if take_held_sigterm() or (stop is not None and stop.is_set()) or (
                parent is not None and os.getppid() != parent.pid):
            raise Terminated()
        if not time_limit.may_start(ctx.start_until):  # --stop-after: the running trial was the last
            return None
        return claim_trial(study, storage, spec, lock, ctx.invocation)

    while (trial := next_trial()) is not None:
        try:
            with Heartbeat(storage, study, trial) as beat:
                value = objective(trial, spec, ctx, beat.fence(on_step))
                abandoned = beat.lost(every_s=0)  # the last check before the trial is told
        except RunAbandoned as exc:  # failed elsewhere meanwhile: recorded as abandoned; Optuna already knows
            print(f"grpo sweep: trial {trial.number}: {exc}", file=sys.stderr, flush=True)
            continue
        except optuna.exceptions.UpdateFinishedTrialError:  # paused after its last step, failed elsewhere meanwhile:
            abandoned = True  # its run trained to the end and is recorded; recording it in the trial found it failed
        except optuna.TrialPruned:  # its runs and MLflow run are recorded as pruned; never retried
            study.tell(trial, state=TrialState.PRUNED)
            if progress is not None:
                progress.poll(force=True)
            continue
        except KeyboardInterrupt as exc:
            release_frames(exc)  # a store read it interrupted (outside a run's own record) would hold its lock
            fail_trial(study, storage, trial.number, interrupted_reason(exc))
            raise
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}".splitlines()[0]
            fail_trial(study, storage, trial.number, message)  # nothing when failed elsewhere meanwhile
            print(f"grpo sweep: trial {trial.number} failed: {message}", file=sys.stderr, flush=True)
            continue
        if abandoned:  # trained to the end, but its trial was failed and its point handed on: not told twice
            print(f"grpo sweep: trial {trial.number} finished after another process had failed it (this worker was "
                  f"silent past the heartbeat window); its point's other run counts", file=sys.stderr, flush=True)
            continue
        if undefined(value):
            trial.set_user_attr("error", f"objective {', '.join(spec.all_objectives)} is not defined for this run")
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)
        if progress is not None:
            progress.poll(force=True)


def _worker_entry(ctx: WorkerContext, stop=None) -> None:
    import multiprocessing
    import signal

    from grpo_core.util.parent_death import die_with_parent

    handle_sigterm()  # spawned workers start without the parent's handler
    # the worker ends, as on SIGTERM (its trial failed, its MLflow run killed), when the sweep's main process
    # dies, even by SIGKILL: orphaned workers had gone on claiming trials beside the resume
    parent = multiprocessing.parent_process()
    die_with_parent(signal.SIGTERM, parent.pid if parent is not None else None)
    try:
        worker_loop(ctx, stop=stop)
    except KeyboardInterrupt as exc:
        # its trial and run are recorded: a signal more (the sweep's terminate() of a worker that had
        # stopped by itself) must not break the exit, where it printed a traceback
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.exit(143 if isinstance(exc, Terminated) else 130)


# ---- the sweep ------------------------------------------------------------------------------------
# what the fingerprints of studies made before 2026-12-01 left out of the base: nothing (so a spec
# unchanged since is still its study's), or save_steps (a spec given save_steps since is too)
LEGACY_DROPS = ((), ("save_steps", "resume_from_checkpoint"))


def spec_fingerprint(spec: SweepSpec, drop: tuple = IGNORED) -> str:
    """What the sweep runs, hashed: a study refuses another spec under its name. The base's keys that
    do not change what a run is (sweeps/spec.py: IGNORED: threads, checkpoints, where runs are logged)
    are left out, so editing them is not another sweep (`drop`: LEGACY_DROPS for the studies made
    before 2026-12-01)."""
    base = {k: v for k, v in spec.base.items() if k not in drop}
    parts = [base, spec.grid, spec.grid_seeds, spec.search, spec.objective, spec.direction, spec.sampler,
             spec.n_trials]
    if spec.objectives or spec.pruner:  # (only then: the fingerprints of the studies before them stand)
        parts += [spec.objectives, spec.directions, spec.pruner]
    if spec.arms:  # what each arm sets is part of what the sweep runs
        parts.append(spec.arms)
    key = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _build_tiny_models(keys: list) -> None:
    from grpo_core.tasks.models import ensure_tiny_model

    for key in keys:
        ensure_tiny_model(*key)


def _prepare_models(spec: SweepSpec, in_child: bool, extras: dict) -> list[str]:
    """Build the tiny base models once, before workers start, instead of in every worker.
    With `in_child`, missing models are built in a spawned process, so that this process never
    runs a multi-threaded torch op before forking workers (GNU OpenMP is not fork-safe).
    Returns the model folders."""
    from grpo_core.tasks.models import committed_base, resolve_model_path, tiny_cache_dir

    configs = ([spec.config_for(p, **extras) for p in spec.grid_points()] if spec.mode == "grid"
               else [spec.config_for({}, **extras)])
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


def set_shared_tag(client, run_id: str, key: str, value: str) -> None:
    """Set a tag of a run that other processes may set at the same moment (the parent run of a grid
    that two machines share). MLflow's store inserts a tag that is not there yet, and the second of
    two inserts at once fails on the tags' unique key ("UNIQUE constraint failed: tags.key,
    tags.run_uuid" when two machines ended their sweeps together, in a CI run of 2026-11-30); once
    the other's row is there, the same write updates it, so it is made once more."""
    try:
        client.set_tag(run_id, key, value)
    except Exception as exc:
        if "unique constraint" not in str(exc).lower():  # (SQLite's "UNIQUE constraint failed", PostgreSQL's
            raise                                           # "violates unique constraint"; anything else stands)
        client.set_tag(run_id, key, value)


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def run_sweep(spec_path: str, workers: int = 1, storage_url: Optional[str] = None,
              tracking_uri: Optional[str] = None, out_root: str = defaults.SWEEPS,
              heartbeat_interval: int = 30, stop_after: float | str | None = None) -> int:
    """Run or resume a sweep. Every input is checked before anything is written. `stop_after`
    (seconds, or a duration such as "1h30m"): start no trial once that much time has passed since
    this call; returns time_limit.EXIT_TIME_LIMIT when points are left for that reason."""
    import optuna
    from optuna.trial import TrialState

    stop_after = None if stop_after is None else time_limit.check_duration(stop_after)
    start_until = None if stop_after is None else time_limit.now() + stop_after

    if workers < 1:
        raise UserInputError(f"--workers: got {workers}; allowed: an integer ≥ 1")
    if Path(out_root).exists() and not Path(out_root).is_dir():
        raise UserInputError(f"--out-root {out_root}: is a file; allowed: a folder for the trial run folders")
    if heartbeat_interval < 1:
        raise UserInputError(f"--heartbeat-interval: got {heartbeat_interval}; allowed: an integer ≥ 1 (seconds)")
    spec = load_spec(spec_path)
    validate_report(spec, claim=False)
    if (Path(out_root) / spec.name).is_symlink():  # its trial folders would be written outside --out-root
        sweep_folder = Path(out_root) / spec.name
        raise UserInputError(f"--out-root {out_root}: the sweep folder {spec.name} is a symbolic link (to "
                             f"{os.readlink(sweep_folder)}); a sweep writes only inside --out-root; allowed: a folder")
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
    model_dirs = _prepare_models(spec, in_child=method == "fork", extras=place_extras(spec, tracking_uri))
    started = time.perf_counter()
    status, procs, stop, parent_run_id, pool = "FINISHED", [], None, None, None
    progress = SweepProgress(spec, study, invocation, workers, start_until=start_until)
    try:
        parent_run_id = parent_run(study, spec, tracking_uri)  # (one stopped as it is made, it has ended)
        base_ctx = WorkerContext(spec_path=str(spec.path), storage_url=storage_url, tracking_uri=tracking_uri,
                                 parent_run_id=parent_run_id, invocation=invocation,
                                 heartbeat_interval=heartbeat_interval,
                                 num_threads=threads_per_worker(workers) if not gpus else 0, out_root=out_root,
                                 trials_before=len(study.get_trials(deepcopy=False)), start_until=start_until)
        if workers == 1:
            worker_loop(replace(base_ctx, gpu="0" if gpus else None), progress)
        else:
            if method == "fork":
                _preload_for_fork(model_dirs)
                _release_connections(storage)
            context = mp.get_context(method)
            stop = context.Event()
            pool = WorkerPool(
                lambda i: context.Process(target=_worker_entry, name=f"grpo-sweep-worker-{i}", args=(
                    replace(base_ctx, worker_index=i, gpu=str(i % gpus) if gpus else None), stop)),
                may_replace=lambda: not stop.is_set() and time_limit.may_start(start_until) and has_work(
                    study, spec, invocation),
                before_fork=lambda: (progress.pause(), _release_connections(storage)),
                after_fork=progress.start_thread,
                on_death=lambda: _recover(study, storage, tracking_uri, storage_url))
            procs = pool.procs
            for i in range(min(workers, _most_trials(spec))):
                pool.start(i)
            progress.start_thread()  # after the forks: no thread of this process crosses one
            pool.join()
    except KeyboardInterrupt as exc:
        release_frames(exc)  # (with one worker, this process's own store reads; the parent run is ended below)
        status = "KILLED"
        if stop is not None:  # no worker claims another trial, whatever signal it got or missed
            stop.set()
        if isinstance(exc, Terminated):  # Ctrl-C reaches the workers itself; SIGTERM went to this process
            for p in procs:
                if p.is_alive():
                    p.terminate()
        for p in procs:  # each records its trial as failed and its run as killed first
            p.join()
        print("grpo sweep: interrupted; run the same command again to resume", file=sys.stderr)
        if procs:  # what the command's last line says is recorded (this process started no run of its own)
            exc.add_note("each trial its workers had begun is recorded as failed, and its run as killed")
        raise
    finally:
        progress.close()
        if parent_run_id is not None:
            client = make_client(tracking_uri)
            set_shared_tag(client, parent_run_id, "wall_time_s", f"{time.perf_counter() - started:.1f}")
            client.set_terminated(parent_run_id, status=status)
    wall = time.perf_counter() - started
    study = optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec))
    _recover(study, storage, tracking_uri, storage_url)  # a worker of this sweep that was killed
    print(trials_table(study, spec))
    if spec.mode == "search":
        log_importance(study, spec, make_client(tracking_uri), parent_run_id)
    trials = study.get_trials(deepcopy=False)
    done_points = ({point_key(grid_point_of(spec, t)) for t in trials if t.state == TrialState.COMPLETE}
                   if spec.mode == "grid" else set())
    # failed in this run, and not run again to the end since (a point failed by a silent worker's heartbeat and
    # finished by another worker stands done)
    failed = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("invocation") == invocation
              and not (spec.mode == "grid" and point_key(grid_point_of(spec, t)) in done_points)]
    replaced = pool.replaced if pool is not None else 0
    started_workers = len(procs) - replaced or 1
    print(f"sweep {spec.name}: {started_workers} worker(s)"
          + (f" ({replaced} replaced after being killed by a signal)" if replaced else "")
          + (f" (of --workers {workers}: no more trials to share; {base_ctx.num_threads} thread(s) each, as for "
             f"{workers})" if started_workers < workers else "") + f", {wall:.1f}s wall; "
          f"{len(failed)} trial(s) failed in this run" + (" (rerun to retry them)" if failed else ""))
    print(ui_line(tracking_uri, parent_run_id, spec.name))
    stopped = start_until is not None and not time_limit.may_start(start_until)
    left = work_left(study, spec, invocation) if stopped else 0
    if left:
        print(f"sweep {spec.name}: stopped starting trials after {format_duration(stop_after)} (--stop-after); {left} "
              f"{'grid point(s)' if spec.mode == 'grid' else 'trial(s)'} left: run the same command again to go on")
    return 1 if failed else time_limit.EXIT_TIME_LIMIT if left else 0


def threads_per_worker(workers: int) -> int:
    """Each worker's CPU threads where the spec sets no num_threads: its share of the CPUs this
    process may use, at most OMP_NUM_THREADS where that is set (a machine whose other cores are
    busy, such as a CI job beside another: a second thread that has to wait for a core makes a
    small model's step many times slower, not faster). The number is recorded in each run's config,
    part of its numbers."""
    share = max(1, usable_cpus() // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(share, int(cap)) if cap.isdigit() and int(cap) > 0 else share


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
                                    directions=spec.all_directions)
        study.set_user_attr("spec_fingerprint", fingerprint)
        return study
    except optuna.exceptions.DuplicatedStudyError:
        pass
    study = optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec))
    deadline = time.monotonic() + wait_s
    while (found := study.user_attrs.get("spec_fingerprint")) is None and time.monotonic() < deadline:
        time.sleep(0.2)  # created a moment ago by another process, which is about to write its fingerprint
        study = optuna.load_study(study_name=spec.name, storage=storage, sampler=make_sampler(spec))
    legacy = {spec_fingerprint(spec, drop) for drop in LEGACY_DROPS} - {fingerprint}
    if found is not None and found != fingerprint and found not in legacy:
        raise UserInputError(f"{spec.path}: a sweep named {spec.name!r} already exists in "
                             f"{describe_storage(storage_url)} with a different spec; rename the sweep")
    if found is None or found in legacy:  # a study from before fingerprints (or before they left IGNORED
        study.set_user_attr("spec_fingerprint", fingerprint)  # out), or whose creator died before writing one
    return study


def _recover(study, storage, tracking_uri: str, storage_url: Optional[str]) -> None:
    """Fail the trials of dead workers and end their MLflow runs as KILLED; say so."""
    failed = fail_stale(study, storage)
    ended = end_orphaned_runs(study, tracking_uri)
    if failed or ended:
        print(f"grpo sweep: {len(failed)} trial(s) of dead workers failed ({describe_storage(storage_url)}), "
              f"{len(ended)} MLflow run(s) ended as KILLED; their grid points run again", file=sys.stderr, flush=True)


