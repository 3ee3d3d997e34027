"""Grid bookkeeping: which trial runs which grid point, claimed under a host lock so that no point
runs twice, even from several machines (sweeps/driving/driver.py starts the workers that claim).

`GridSampler` maps trial number k < grid size to grid point k, and the storage allocates trial
numbers atomically, so the first pass never runs a point twice. Past it (points whose trial failed
in an earlier invocation, or beside adopted run folders) the point is enqueued with fixed params;
two machines that enqueue the same point at once are told apart by `earlier_claim`. A search
claims a trial while its study has fewer than `n_trials` (any state: a pruned or failed trial is
never retried).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Optional

from filelock import FileLock

from grpo_core.record.provenance import owner_id
from grpo_core.util.errors import interrupts_deferred

from .adopt import has_adopted
from .recovery import fail_stale, fail_trial, interrupted_reason
from ..spec import SweepSpec, grid_point_of, grid_space, point_key


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
    """Grid points with no COMPLETE or RUNNING trial, and no failure in this invocation; a point
    waiting to run again (the heartbeat's retry of a silent worker's trial) is free whatever failed."""
    from optuna.trial import TrialState

    taken, failed_now, waiting = set(), set(), set()
    for t in trials:
        point = _claimed_point(spec, t)
        if point is None:
            continue
        if t.state == TrialState.WAITING:  # free until asked for: the next ask runs it
            waiting.add(point_key(point))
        elif t.state in (TrialState.COMPLETE, TrialState.RUNNING):
            taken.add(point_key(point))
        elif t.user_attrs.get("invocation") == invocation:  # failed just now: retry on a rerun
            failed_now.add(point_key(point))
    # unless the failure was handed to a heartbeat retry (waiting): that retry runs it now
    return [p for p in spec.grid_points() if point_key(p) not in taken | (failed_now - waiting)]


SETTLE_S = 10.0  # how long a claim waits for trials other machines have just asked for to show their point
DUPLICATE = "its grid point was claimed at the same moment by trial {} (another machine); not run"


def claim_trial(study, storage, spec: SweepSpec, lock_path: Path, invocation: str):
    """Create the next trial, or None when the sweep has nothing left for this invocation.
    Trials of dead workers are failed first (sweeps/driving/recovery.py); each new trial records its
    owner process, so that its own death can be detected. A grid trial past the first pass that
    finds its point claimed by an earlier trial (two machines at once: the lock is per host) is
    ended as PRUNED, saying so, and the claim starts over."""
    from optuna.trial import TrialState

    while True:
        trial = _claim_once(study, storage, spec, lock_path, invocation)
        if (
            trial is None
            or spec.mode != "grid"
            or (trial.number < len(spec.grid_points()) and not has_adopted(study.get_trials(deepcopy=False)))
        ):
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


CLAIM_INTERRUPTED = "{} as its trial was claimed; its point runs again"  # {}: interrupted_reason


def _claim_once(study, storage, spec: SweepSpec, lock_path: Path, invocation: str):
    """The next trial, made, given its point and owned under the host's claim lock. Ctrl-C and
    SIGTERM that come from the trial's making to its owner's record are raised once it is owned,
    and the trial is then failed at once: raised between the two, they had left it RUNNING with no
    owner, which no detector failed, so its grid point counted as taken and every rerun ended without
    training it (tests/test_interrupted_claims.py). A trial left so by SIGKILL is failed by fail_stale
    (fail_unowned)."""
    from optuna.trial import TrialState

    with FileLock(lock_path):
        fail_stale(study, storage)
        trials = study.get_trials(deepcopy=False)
        if spec.mode == "search":
            # the budget: trials that ran, or failed in this invocation; a trial that failed in an
            # earlier one (killed, an error) is run again at its own point, once per invocation
            counted = [t for t in trials if t.state != TrialState.FAIL or t.user_attrs.get("invocation") == invocation]
            if len(counted) >= spec.n_trials:
                return None
            retried = {t.user_attrs.get("retry_of") for t in trials}
            failed = [
                t
                for t in trials
                if t.state == TrialState.FAIL
                and t.number not in retried
                and t.params
                and t.user_attrs.get("invocation") != invocation
            ]
            if failed:
                study.enqueue_trial(failed[0].params, user_attrs={"retry_of": failed[0].number})
        else:
            free = free_points(spec, trials, invocation)
            if not free:
                return None
            waiting = any(t.state.name == "WAITING" for t in trials)  # e.g. a heartbeat retry
            if (len(trials) >= len(spec.grid_points()) or has_adopted(trials)) and not waiting:
                study.enqueue_trial(free[0])  # past the first pass, or beside adopted folders: fix the point
        trial = None
        try:
            with interrupts_deferred():  # made and owned whole: see _claim_once's docstring
                with warnings.catch_warnings():  # "heartbeat is supposed to be used with optimize": we beat ourselves
                    warnings.simplefilter("ignore", UserWarning)
                    trial = study.ask()
                if spec.mode == "grid":  # its point, recorded as params while no other worker of this host can claim
                    for name, choices in grid_space(spec).items():
                        trial.suggest_categorical(name, choices)
                trial.set_user_attr("owner", owner_id())
                trial.set_user_attr("invocation", invocation)  # before any other claim sees it (the search's budget)
        except KeyboardInterrupt as exc:  # (Terminated is one) raised as the block ended: the trial is failed now
            if trial is not None:
                fail_trial(study, storage, trial.number, CLAIM_INTERRUPTED.format(interrupted_reason(exc)))
            raise
        return trial


def work_left(study, spec: SweepSpec, invocation: str) -> int:
    """Trials this invocation could still start: a grid's free points, or a search's budget left."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    if spec.mode == "search":
        return max(
            0,
            spec.n_trials
            - len([t for t in trials if t.state != TrialState.FAIL or t.user_attrs.get("invocation") == invocation]),
        )
    return len(free_points(spec, trials, invocation))


def has_work(study, spec: SweepSpec, invocation: str) -> bool:
    return work_left(study, spec, invocation) > 0
