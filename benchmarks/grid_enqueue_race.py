"""Does `study.enqueue_trial(params, skip_if_exists=True)` plus `ask`/`tell` alone keep a grid
point from running twice when several processes share one study? Figures: docs/development/layout.md (the design notes).

Each of --workers processes (started together) loops: for every grid point not yet enqueued,
call `enqueue_trial(point, skip_if_exists=True)`, then `ask()` and `tell()` the trial it gets,
until `ask()` hands out a trial with no fixed params (nothing waiting). No lock of ours is held.
Counts grid points that ran more than once. The driver (sweeps/driving/driver.py) does not rely on this:
it claims under a host lock and gives first-pass trials their point by trial number. Usage:

    .venv/bin/python benchmarks/grid_enqueue_race.py [--workers 4] [--points 32] [--repeats 5]
                                                     [--storage journal|sqlite]
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import os
import shutil
import tempfile
import warnings
from pathlib import Path


def _storage(kind: str, folder: Path):
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    if kind == "journal":
        path = str(folder / "journal.log")
        return optuna.storages.JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path + ".lock")))
    return optuna.storages.RDBStorage(f"sqlite:///{folder}/optuna.db", engine_kwargs={"connect_args": {"timeout": 60}})


def _worker(kind: str, folder: str, points: int, start) -> None:
    import optuna

    class NotEnqueued(optuna.samplers.RandomSampler):
        """A trial that was not enqueued gets point -1 (enqueued ones get their fixed value)."""

        def sample_independent(self, study, trial, param_name, param_distribution):
            return -1

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    study = optuna.load_study(study_name="race", storage=_storage(kind, Path(folder)), sampler=NotEnqueued())
    start.wait()
    while True:
        for i in range(points):
            study.enqueue_trial({"point": i}, skip_if_exists=True)
        trial = study.ask()
        try:
            if trial.suggest_categorical("point", [-1, *range(points)]) == -1:  # nothing was waiting: done
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                return
            study.tell(trial, 0.0)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):  # another process finished it:
            (Path(folder) / f"twice-{trial.number}-{os.getpid()}").touch()  # ask handed it out twice


def one_race(kind: str, workers: int, points: int) -> tuple[int, int, int]:
    """(grid points that ran more than once, trials that ran a point, trials that `ask` handed to
    two processes) for one fresh study."""
    import optuna

    folder = Path(tempfile.mkdtemp(prefix="grpo-enqueue-race-"))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(study_name="race", storage=_storage(kind, folder))
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_worker, args=(kind, str(folder), points, start)) for _ in range(workers)]
    for p in procs:
        p.start()
    import time

    time.sleep(5)  # every worker has imported optuna and loaded the study
    start.set()
    for p in procs:
        p.join()
    study = optuna.load_study(study_name="race", storage=_storage(kind, folder))
    ran = collections.Counter(
        t.params["point"] for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    )
    twice = len(list(folder.glob("twice-*")))
    shutil.rmtree(folder, ignore_errors=True)
    return sum(1 for n in ran.values() if n > 1), sum(ran.values()), twice


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--points", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--storage", choices=("journal", "sqlite"), default="journal")
    args = parser.parse_args()
    import optuna

    print(
        f"optuna {optuna.__version__}, {args.storage} storage, {args.workers} processes, "
        f"{args.points} grid points, enqueue_trial(skip_if_exists=True) + ask/tell, no lock"
    )
    for r in range(args.repeats):
        dup, trials, twice = one_race(args.storage, args.workers, args.points)
        print(
            f"race {r + 1}: {trials} trials ran for {args.points} points; {dup} points ran more than once; "
            f"{twice} trials were handed to two processes"
        )


if __name__ == "__main__":
    main()
