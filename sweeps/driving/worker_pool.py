"""A sweep's worker processes: started, joined, and one killed by a signal replaced.

A worker that dies by a signal it could not catch (the kernel's OOM killer, SIGKILL) records
nothing; the other workers fail its trial before their next claim (recovery.fail_dead_owners) and
its grid point runs again on the next `grpo sweep`. Before this pool, its share of the machine then
stayed idle until the sweep ended (C5 on the 2-core machine, 2026-12-01: one worker killed for
memory, one core idle for 45 minutes). Now a fresh worker takes its index while the sweep still
has points to start; a worker that ends by itself (no work left, SIGTERM, Ctrl-C, an error) is not
replaced. Each replacement claims a point the dead worker did not hold, so replacements are
bounded by the grid."""

from __future__ import annotations

import sys
from typing import Callable


class WorkerPool:
    """`start(i)` starts worker i (`make(i)` builds its unstarted Process); `join()` waits for all
    of them, replacing a worker killed by a signal while `may_replace()` says the sweep goes on.
    `before_fork` and `after_fork` run around each replacement's start (the parent's progress thread
    and database connections must not cross a fork). `procs` lists every process started."""

    def __init__(self, make: Callable, may_replace: Callable[[], bool], before_fork: Callable[[], None],
                 after_fork: Callable[[], None]):
        self.make, self.may_replace = make, may_replace
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
                if proc.exitcode is not None and proc.exitcode < 0 and self.may_replace():
                    index = self._index[proc.pid]
                    print(f"grpo sweep: worker {index} (pid {proc.pid}) was killed by signal {-proc.exitcode}; its "
                          f"trial is recorded as failed and runs again on the next sweep, and a new worker takes "
                          f"its place", file=sys.stderr, flush=True)
                    self.before_fork()
                    try:
                        alive.append(self.start(index))
                    finally:
                        self.after_fork()
                    self.replaced += 1
