"""Trials whose worker died: detect them, fail them, end their MLflow runs as KILLED.

A worker killed mid-trial (SIGKILL, the OOM killer, a lost machine) leaves its Optuna trial
RUNNING forever, which would block its grid point. Three detectors:

- every trial records its owner, `host:pid:process-start-time`; a RUNNING trial whose owner
  process no longer exists on this host is failed (any storage; the start time guards against
  a reused pid). This is the journal storage's detector: the journal is a one-machine store.
- RDB storages (PostgreSQL, SQLite) also use Optuna's heartbeat: each worker records a heartbeat
  every `heartbeat_interval` seconds while its trial runs, `optuna.storages.fail_stale_trials`
  fails trials silent for longer than the grace period (a dead worker on any machine), and
  `RetryHeartbeatStaleTrialCallback` enqueues a retry of the same parameters.
- a RUNNING trial with no owner, 10 minutes after it started: its worker died as it claimed it
  (fail_unowned).

A failed trial's grid point is free again for the next `grpo sweep`. Its MLflow run, left
RUNNING by the dead process, is ended as KILLED with a `failure_reason` tag, and its run folder
gets a summary.json with status "killed" when the process died before writing one.
"""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path
from typing import Optional

from grpo_core.record.provenance import owner_alive

HEARTBEAT_REASON = "worker stopped sending heartbeats (died, or lost its machine)"


def trial_id(storage, study, number: int) -> int:
    """The storage's id of a study's trial, through the public storage interface."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def fail_dead_owners(study, storage) -> list[int]:
    """Fail the RUNNING trials whose owner process is gone from this host; their numbers.
    `storage`: the one the study was loaded with."""
    from optuna.trial import TrialState

    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.user_attrs.get("owner")
        if (
            owner
            and owner_alive(owner) is False
            and fail_trial(study, storage, t.number, f"worker died (pid {owner.rsplit(':', 2)[1]} on this host)")
        ):
            failed.append(t.number)
    return failed


UNOWNED_AFTER_S = 600.0  # a RUNNING trial with no owner this long after it started: its claimant died
UNOWNED_REASON = "its worker died as it claimed the trial, before recording itself as the owner"


def fail_unowned(study, storage, older_than_s: Optional[float] = None) -> list[int]:
    """Fail the RUNNING trials that never recorded an owner and started over `older_than_s`
    (default UNOWNED_AFTER_S) ago; their numbers. A claim makes its trial and records the owner ms
    apart, whole against Ctrl-C and SIGTERM (claims.py), so such a trial's claimant died in between
    (SIGKILL). The age spares a claim under way on another machine sharing the store (whose claim
    lock is its own); it is read by the claimant's clock, and the margin covers clocks that differ."""
    import datetime

    from optuna.trial import TrialState

    older_than_s = UNOWNED_AFTER_S if older_than_s is None else older_than_s
    now, failed = datetime.datetime.now(), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if (
            t.user_attrs.get("owner")
            or t.datetime_start is None
            or (now - t.datetime_start).total_seconds() < older_than_s
        ):
            continue
        if fail_trial(study, storage, t.number, UNOWNED_REASON):
            failed.append(t.number)
    return failed


def fail_running(study, storage, reason: str) -> list[int]:
    """Fail every RUNNING trial, whoever owns it, recording `reason`; their numbers. For a store
    moved from a machine that is gone (scripts/gpu_agenda.py --resume), where no trial can still run."""
    from optuna.trial import TrialState

    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    return [number for number in running if fail_trial(study, storage, number, reason)]


def interrupted_reason(exc: BaseException) -> str:
    """A trial's `error` when Ctrl-C or SIGTERM (`exc`) stopped it."""
    from grpo_core.util.errors import Terminated

    return "interrupted (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


def fail_trial(study, storage, number: int, reason: str) -> bool:
    """Mark one trial FAIL with its `error` user attribute (what `grpo sweep` shows and retries);
    False, and nothing written, when the trial has finished meanwhile (its worker told it, or
    another process failed it between our listing and this write): the trial already says why."""
    import optuna
    from optuna.trial import TrialState

    try:
        storage.set_trial_user_attr(trial_id(storage, study, number), "error", reason)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
    return True


def heartbeat_interval(storage) -> Optional[float]:
    """The storage's heartbeat interval in seconds, or None when it has no heartbeat (journal)."""
    get = getattr(storage, "get_heartbeat_interval", None)
    return get() if callable(get) else None


def fail_stale(study, storage) -> list[int]:
    """The three detectors; returns the trial numbers failed now. `storage`: the one the study was
    loaded with."""
    import optuna
    from optuna.trial import TrialState

    failed = fail_dead_owners(study, storage) + fail_unowned(study, storage)
    if heartbeat_interval(storage):
        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        after = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        failed += sorted(before - after)
    return failed


class Heartbeat:
    """Records the trial's heartbeat every interval while the trial runs (RDB storages only)."""

    def __init__(self, storage, study, trial):
        self.storage = storage
        self.trial_id = trial_id(storage, study, trial.number)
        self.stop = threading.Event()
        self.thread = None
        self._checked, self._lost = time.monotonic(), False
        interval = heartbeat_interval(self.storage)
        if interval:
            self.storage.record_heartbeat(self.trial_id)
            self.thread = threading.Thread(
                target=self._beat, args=(interval,), daemon=True, name=f"optuna-heartbeat-{self.trial_id}"
            )
            self.thread.start()

    def lost(self, every_s: float = 5.0) -> bool:
        """Whether the trial is no longer this worker's: failed by another process (its heartbeat
        went silent while this one was paused, or its owner looked dead). Read from the storage at
        most every `every_s` seconds (and always with every_s 0)."""
        from optuna.trial import TrialState

        now = time.monotonic()
        if now - self._checked >= every_s:
            self._checked = now
            try:
                self._lost = self.storage.get_trial(self.trial_id).state != TrialState.RUNNING
            except Exception:  # a transient storage error: asked again next time
                pass
        return self._lost

    def fence(self, hook=None):
        """`hook` (a run's on_step) behind the check: a trial that is no longer this worker's stops its
        run (RunAbandoned) before it writes another step."""
        from grpo_core.util.errors import RunAbandoned

        def fenced(*args):
            if self.lost():
                raise RunAbandoned(
                    "its trial was failed by another process while this worker was silent "
                    "(paused past the heartbeat window); its point runs again elsewhere"
                )
            if hook is not None:
                hook(*args)

        return fenced

    def _beat(self, interval: float) -> None:
        while not self.stop.wait(interval):
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # a transient database error: the next beat retries
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


def end_orphaned_runs(study, tracking_uri: str) -> list[str]:
    """End as KILLED the MLflow runs of FAIL trials that are still RUNNING (their process died):
    their curves backfilled from metrics.jsonl, the missing summary.json written. Returns the run
    ids ended."""
    from optuna.trial import TrialState

    from grpo_core.mlflow_store import make_client

    from grpo_core.mlflow_recovery import backfill_and_end
    from grpo_core.run import write_json

    client = make_client(tracking_uri)
    ended = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        reason = str(t.user_attrs.get("error") or HEARTBEAT_REASON)
        run_dir = t.user_attrs.get("run_dir")
        run_id = t.user_attrs.get("mlflow_run_id")
        try:
            running = bool(run_id) and client.get_run(run_id).info.status == "RUNNING"
        except Exception:  # the run is in another tracking store, or was deleted
            running = False
        if running:
            backfill_and_end(client, run_id, run_dir, reason)
            ended.append(run_id)
        elif run_dir and Path(run_dir).is_dir() and not (Path(run_dir) / "summary.json").exists():
            write_json(Path(run_dir) / "summary.json", {"status": "killed", "error": reason})
    return ended
