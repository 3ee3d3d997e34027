"""A sweep's worker processes: started, joined, and one killed by a signal replaced.

A worker that dies by a signal it could not catch (the kernel's OOM killer, SIGKILL) records
nothing itself. The pool sees it end and has its trial failed and its MLflow run ended as KILLED at
once (`on_death`, the driver's recovery.fail_stale and end_orphaned_runs), so the progress line and
the MLflow UI stop showing a dead run as running: before, that waited for another worker's next
claim, and under `--stop-after` or with no claim to come, for the next `grpo sweep` (C5, 2026-12-02:
"running t52 7/40" for 20 minutes after its worker was killed). Its grid point runs again on the
next `grpo sweep`. Before this pool, its share of the machine stayed idle until the sweep ended (C5
on the 2-core machine, 2026-12-01: one worker killed for memory, one core idle for 45 minutes). Now
a fresh worker takes its index while the sweep still has points to start; a worker that ends by
itself (no work left, SIGTERM, Ctrl-C, an error) is not replaced. Each replacement claims a point
the dead worker did not hold, so replacements are bounded by the grid."""

from __future__ import annotations

import sys
from typing import Callable


class WorkerPool:
    """`start(i)` starts worker i (`make(i)` builds its unstarted Process); `join()` waits for all
    of them, calling `on_death()` when one is killed by a signal, then replacing it while
    `may_replace()` says the sweep goes on. `before_fork` and `after_fork` run around each
    replacement's start (the parent's progress thread and database connections must not cross a
    fork). `procs` lists every process started."""

    def __init__(
        self,
        make: Callable,
        may_replace: Callable[[], bool],
        before_fork: Callable[[], None],
        after_fork: Callable[[], None],
        on_death: Callable[[], None] = lambda: None,
    ):
        self.make, self.may_replace, self.on_death = make, may_replace, on_death
        self.before_fork, self.after_fork = before_fork, after_fork
        self.procs: list = []
        self.replaced = 0
        self._index: dict[int, int] = {}

    def start(self, index: int):
        proc = self.make(index)
        proc.start()
        self.procs.append(proc)
        self._index[proc.pid] = index
        return proc

    def join(self) -> None:
        from multiprocessing.connection import wait

        alive = list(self.procs)
        while alive:
            wait([p.sentinel for p in alive])
            for proc in [p for p in alive if not p.is_alive()]:
                alive.remove(proc)
                proc.join()
                if proc.exitcode is None or proc.exitcode >= 0:
                    continue
                index, replace = self._index[proc.pid], self.may_replace()
                print(
                    f"grpo sweep: worker {index} (pid {proc.pid}) was killed by signal {-proc.exitcode}; its "
                    f"trial is recorded as failed now and runs again on the next sweep"
                    + (", and a new worker takes its place" if replace else ""),
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    self.on_death()
                except Exception as exc:  # a storage hiccup: the next claim or `grpo sweep` fails the trial
                    print(
                        f"grpo sweep: could not record worker {index}'s trial as failed yet ({exc}); the next "
                        f"claim or sweep does",
                        file=sys.stderr,
                        flush=True,
                    )
                if replace:
                    self.before_fork()
                    try:
                        alive.append(self.start(index))
                    finally:
                        self.after_fork()
                    self.replaced += 1
