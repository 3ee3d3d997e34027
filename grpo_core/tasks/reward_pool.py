"""Reward functions off the training thread: worker processes, a per-completion timeout, results
in order (math-verify's parsing was a large share of a SmolLM2 step on the training thread:
results/benchmarks/README.md).

Each worker process calls a reward function on one completion at a time (TRL's signature, lists
of length 1) and sends back each value as soon as it has it. The parent gives every completion
`timeout` seconds: a worker that goes quiet longer is killed, its current completion gets
`timeout_value` and counts in `rewards/timeouts`, and a fresh worker takes the rest of its share,
so a hanging reward can never stall training; a function that times out on more than half of a
step's completions fails the run (timeouts are not a reward signal). A reward that raises (or
calls sys.exit, or returns what cannot be sent back) fails the run exactly as in
the training process (rewards.compute_rewards): the message names the function and the completion.
`submit` returns at once, so the trainer computes reference log-probs while the rewards run.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Optional

from grpo_core.util.errors import RunFailure
from grpo_core.util.parent_death import die_with_parent
from grpo_core.tasks.rewards import RewardFunc, check_values

_POLL = 0.05  # seconds between checks for results and overdue workers
MAX_TIMEOUT_SHARE = 0.5  # a step where one reward function timed out on more of its completions fails the run


def _worker(funcs: dict, tasks, results, parent: int) -> None:
    """Run (job, name, index, completion, columns) items; send ("start", monotonic time) before each
    and then (job, name, index, "ok" | "error", value | exception text)."""
    import signal

    die_with_parent(signal.SIGKILL, parent)  # a killed trainer leaves no worker waiting on its queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import pickle

    while (item := tasks.get()) is not None:
        job, name, index, completion, columns = item
        results.put(("start", time.monotonic()))  # the clock every process on this host shares
        try:
            value = list(funcs[name]([completion], **{k: [v] for k, v in columns.items()}))
            value = value[0] if len(value) == 1 else value
        except BaseException as exc:  # sys.exit() too: reported, not raised; the parent fails the run
            results.put((job, name, index, "error", f"raised {type(exc).__name__}: {exc}"))
            continue
        try:  # the queue pickles in a thread of its own, where a failure would be lost (and the parent wait)
            pickle.dumps(value)
        except Exception as exc:
            results.put(
                (
                    job,
                    name,
                    index,
                    "error",
                    f"returned {type(value).__name__}, which cannot be sent back "
                    f"from a reward worker ({type(exc).__name__}); allowed: numbers",
                )
            )
            continue
        results.put((job, name, index, "ok", value))


class _Worker:
    def __init__(self, context, funcs):
        self.tasks = context.Queue()
        self.results = context.Queue()
        self.process = context.Process(
            target=_worker, args=(funcs, self.tasks, self.results, os.getpid()), daemon=True, name="grpo-reward-worker"
        )
        self.process.start()
        self.pending: list = []  # items sent, in order; the first is the next to finish
        self.started: Optional[float] = None  # when the worker started its current item (its own report)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            self.tasks.put(None)
        self.process.join()


class RewardPool:
    """`submit(completions, columns)` -> a handle; `collect(handle)` -> ({name: values}, timeouts)."""

    def __init__(self, funcs: dict[str, RewardFunc], workers: int, timeout: float = 0.0, timeout_value: float = 0.0):
        self.funcs, self.timeout, self.timeout_value = funcs, timeout, timeout_value
        methods = mp.get_all_start_methods()
        self.context = mp.get_context("fork" if "fork" in methods else "spawn")
        self.workers = [_Worker(self.context, funcs) for _ in range(workers)]
        self._job = 0
        self._jobs: dict[int, dict] = {}

    def submit(self, completions: list[str], columns: dict[str, list]) -> int:
        self._job += 1
        items = [
            (self._job, name, i, completions[i], {k: v[i] for k, v in columns.items()})
            for name in self.funcs
            for i in range(len(completions))
        ]
        for n, item in enumerate(items):  # round-robin over the workers
            worker = self.workers[n % len(self.workers)]
            worker.pending.append(item)
            worker.tasks.put(item)
        self._jobs[self._job] = {
            "completions": completions,
            "values": {name: [None] * len(completions) for name in self.funcs},
            "timeouts": {name: 0 for name in self.funcs},
        }
        return self._job

    def collect(self, job: int) -> tuple[dict[str, list[float]], int]:
        """Wait for every value of `job`; ({name: values in completion order}, timeouts)."""
        state = self._jobs[job]
        while any(item[0] == job for w in self.workers for item in w.pending):
            progressed = False
            for w in self.workers:
                while not w.results.empty() or (w.pending and not w.process.is_alive()):
                    if w.results.empty():  # died without answering (a crash in the reward's C code)
                        self._replace(w, state, reason="worker died")
                        break
                    self._record(w, w.results.get(), state)
                    progressed = True
                if w.pending and self.timeout and w.started is not None and time.monotonic() - w.started > self.timeout:
                    self._replace(w, state, reason="timeout")  # measured from the item's own start: a slow
                    progressed = True  # machine or a late worker start is not a timeout
            if not progressed:
                time.sleep(_POLL)
        del self._jobs[job]
        completions = state["completions"]
        for name, count in state["timeouts"].items():  # rewards that mostly time out are not a reward signal
            if count > MAX_TIMEOUT_SHARE * len(completions):
                self.close()
                raise RunFailure(
                    f"reward function {name} timed out on {count} of {len(completions)} completions of a "
                    f"step (reward_timeout {self.timeout:g} s); allowed: at most "
                    f"{MAX_TIMEOUT_SHARE:.0%} per step"
                )
        out = {}
        for name, values in state["values"].items():
            out[name] = check_values(name, values, completions)
        return out, sum(state["timeouts"].values())

    def _record(self, w: _Worker, message, state) -> None:
        if message[0] == "start":
            w.started = message[1]
            return
        job, name, index, status, value = message
        w.pending.pop(0)
        w.started = None
        if status == "error":
            self.close()
            raise RunFailure(f"reward function {name} {value} on completion {index}: {state['completions'][index]!r}")
        if job in self._jobs:
            self._jobs[job]["values"][name][index] = value

    def _replace(self, w: _Worker, state, reason: str) -> None:
        """Kill a stuck or dead worker; its running item gets timeout_value; a new worker takes the rest."""
        job, name, index, _, _ = w.pending.pop(0)
        if reason == "worker died" and not self.timeout:
            self.close()
            raise RunFailure(
                f"reward function {name} crashed its worker process on completion {index}: "
                f"{state['completions'][index]!r}"
            )
        if job in self._jobs:
            self._jobs[job]["values"][name][index] = self.timeout_value
            self._jobs[job]["timeouts"][name] += 1
        rest = w.pending
        w.stop(kill=True)
        fresh = _Worker(self.context, self.funcs)
        self.workers[self.workers.index(w)] = fresh
        for item in rest:
            fresh.pending.append(item)
            fresh.tasks.put(item)

    def close(self) -> None:
        for w in self.workers:
            if w.process.is_alive():
                w.stop(kill=bool(w.pending))
        self.workers = []


def make_pool(funcs: dict[str, RewardFunc], workers: int, timeout: float, timeout_value: float) -> Optional[RewardPool]:
    return RewardPool(funcs, workers, timeout, timeout_value) if workers > 0 else None
