"""Progress of a running sweep, for the person watching it: trials finished out of the total,
failed ones, the running trials' current steps, and an estimate of the time left from the wall
times of the trials finished so far (in a grid, of the same variant where it has some). Read from
the study's storage and the trials' run folders, so it counts every worker process (and every
machine sharing the storage). Under `--stop-after` (time_limit.py) the estimate is of when the
command ends: once the limit has passed, only the running trials' rest; before it, at most the time
to the limit and one more trial.

On a terminal it is one bar updated in place (tqdm); otherwise one plain line per finished trial,
so a log file stays readable. `poll` does the work; the sweep calls it from a thread of the parent
process while worker processes train, or between steps when it trains in its own process (no
thread there: trainers fork reward workers)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Optional, TextIO

from grpo_core.config.schema import GRPOConfig

from ..spec import SweepSpec


def format_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _key(params: dict) -> tuple:
    """A grid point as a set of (axis, value) pairs, the same however the dict was ordered."""
    return tuple(sorted(params.items()))


def _variant(params: dict) -> tuple:
    """A grid point less its seed: the runs that should take about as long."""
    return _key({k: v for k, v in params.items() if k != "seed"})


def _steps_written(run_dir: Optional[str]) -> int:
    """Steps a running trial has finished: lines of its metrics.jsonl (it is flushed every step)."""
    if not run_dir:
        return 0
    try:
        with open(Path(run_dir) / "metrics.jsonl", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


class SweepProgress:
    def __init__(
        self,
        spec: SweepSpec,
        study,
        invocation: str,
        workers: int,
        stream: Optional[TextIO] = None,
        interval: float = 1.0,
        start_until: Optional[float] = None,
    ):
        self.spec, self.study, self.invocation, self.workers = spec, study, invocation, workers
        self.start_until = start_until  # wall time after which no trial starts (--stop-after), or None
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval
        self.total = len(spec.grid_points()) if spec.mode == "grid" else spec.n_trials
        self.started = time.monotonic()
        self._reported: set[int] = set()  # trial numbers whose end was printed (plain mode)
        self._last_poll = 0.0
        self._bar = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---- what the sweep looks like now -----------------------------------------------------------
    def _max_steps(self, params: dict) -> int:
        return int(params.get("max_steps", self.spec.base.get("max_steps", GRPOConfig.max_steps)))

    def snapshot(self) -> dict:
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        done_points, failed, running, walls, ended, pruned = set(), [], [], [], [], 0
        running_params = []  # (params, the share of its steps still to run) per running trial
        now = time.time()
        for t in trials:
            mine = t.user_attrs.get("invocation") == self.invocation
            if t.state == TrialState.COMPLETE:
                done_points.add(_key(t.params) if self.spec.mode == "grid" else t.number)
                if mine and t.datetime_start and t.datetime_complete:
                    walls.append((_variant(t.params), (t.datetime_complete - t.datetime_start).total_seconds()))
            elif t.state == TrialState.FAIL and mine:
                failed.append(t)
            elif t.state == TrialState.PRUNED and self.spec.mode == "search":  # a search's pruner stopped it
                pruned += 1
            elif t.state == TrialState.RUNNING:
                step, max_steps = _steps_written(t.user_attrs.get("run_dir")), self._max_steps(t.params)
                elapsed = now - t.datetime_start.timestamp() if t.datetime_start else 0.0
                running.append((t.number, step, max_steps, elapsed))
                running_params.append((t.params, max(0.0, 1.0 - step / max_steps)))
            if mine and t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED):
                ended.append(t)
        done = len(done_points)
        # time per trial: the finished ones of this invocation; before any has finished, the running
        # ones extrapolated from their steps. A grid's variants (its points less the seed) can differ
        # several-fold (7 prompts a step against 4): each point left is timed by its own variant's
        # finished trials, where it has some
        per_trial = sum(w for _, w in walls) / len(walls) if walls else None
        if per_trial is None:
            rates = [elapsed * max_steps / step for _, step, max_steps, elapsed in running if step >= 5]
            per_trial = sum(rates) / len(rates) if rates else None
        if per_trial is None:
            eta = None
        elif self.spec.mode == "grid":
            by_variant: dict[tuple, list[float]] = {}
            for variant, wall in walls:
                by_variant.setdefault(variant, []).append(wall)

            def cost(params: dict) -> float:
                own = by_variant.get(_variant(params))
                return sum(own) / len(own) if own else per_trial

            taken = done_points | {_key(t.params) for t in failed} | {_key(p) for p, _ in running_params}
            left = [p for p in self.spec.grid_points() if _key(p) not in taken]
            rests = [cost(p) * share for p, share in running_params]
            work = sum(cost(p) for p in left) + sum(rests)
            eta = self._limited(work / max(1, self.workers), rests, max((cost(p) for p in left), default=0.0), now)
        else:
            remaining = max(0, self.total - done - len(failed) - pruned)
            left_work = remaining - sum(min(1.0, step / max_steps) for _, step, max_steps, _ in running)
            rests = [per_trial * share for _, share in running_params]
            eta = self._limited(max(0.0, left_work) * per_trial / max(1, self.workers), rests, per_trial, now)
        return {"done": done, "failed": len(failed), "running": running, "eta": eta, "ended": ended, "pruned": pruned}

    def _limited(self, eta: float, running_rests: list[float], one_trial: float, now: float) -> float:
        """The estimate under --stop-after: past the limit no trial starts, so the command ends when
        its longest running trial does; before it, no later than the limit plus one more trial."""
        if self.start_until is None:
            return eta
        if now >= self.start_until:
            return max(running_rests, default=0.0)
        return min(eta, self.start_until - now + max(one_trial, *running_rests))

    # ---- showing it --------------------------------------------------------------------------------
    def _line(self, snap: dict) -> str:
        running = ", ".join(f"t{n} {s}/{m}" for n, s, m, _ in sorted(snap["running"])[:4])
        more = len(snap["running"]) - 4
        return (
            f"{snap['done']}/{self.total} done, {snap['failed']} failed"
            + (f", {snap['pruned']} pruned" if snap.get("pruned") else "")
            + (f" · running {running}{f' (+{more})' if more > 0 else ''}" if running else "")
            + f" · ETA {format_duration(snap['eta'])}"
        )

    def poll(self, force: bool = False) -> None:
        """Read the storage and show what changed; at most once per `interval` unless forced."""
        now = time.monotonic()
        if not force and now - self._last_poll < self.interval:
            return
        self._last_poll = now
        try:
            snap = self.snapshot()
        except Exception:  # a storage hiccup never stops the sweep; the next poll tries again
            return
        if self.tty:
            if self._bar is None:
                import shutil

                from tqdm.auto import tqdm

                width = shutil.get_terminal_size((120, 24)).columns or 120  # a terminal that reports 0 columns
                self._bar = tqdm(
                    total=self.total,
                    desc=self.spec.name,
                    unit="trial",
                    file=self.stream,
                    ncols=width,
                    bar_format="{desc}: {bar:20} {n_fmt}/{total_fmt} trials{postfix}",
                )
            self._bar.n = snap["done"]
            self._bar.set_postfix_str(self._line(snap).split(", ", 1)[1], refresh=True)
            return
        for t in snap["ended"]:
            if t.number in self._reported:
                continue
            self._reported.add(t.number)
            point = ", ".join(f"{k}={v}" for k, v in t.params.items())
            if t.state.name == "COMPLETE" and t.values is not None and len(t.values) > 1:
                what = ", ".join(f"{o} {v:g}" for o, v in zip(self.spec.all_objectives, t.values))
            elif t.state.name == "COMPLETE" and t.values is not None:
                what = f"{self.spec.objective} {self.spec.value_text(t.values[0], t.user_attrs)}"
            else:
                what = str(t.user_attrs.get("error", t.state.name))[:80]
            print(
                f"[{self.spec.name}] trial {t.number} {t.state.name.lower()} ({point}): {what} · {self._line(snap)}",
                file=self.stream,
                flush=True,
            )

    # ---- in the background (the parent of worker processes) ---------------------------------------
    def start_thread(self) -> "SweepProgress":
        def loop():
            while not self._stop.wait(self.interval):
                self.poll(force=True)

        self._thread = threading.Thread(target=loop, name=f"grpo-progress-{self.spec.name}", daemon=True)
        self._thread.start()
        return self

    def pause(self) -> None:
        """Stop the thread (if any) without a line; start_thread starts it again (a worker is about to
        be forked: no thread of this process may cross a fork)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._stop.clear()

    def close(self) -> None:
        """Stop the thread (if any) and show the final state."""
        self.pause()
        self.poll(force=True)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
