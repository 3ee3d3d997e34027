"""`grpo sweep --stop-after DURATION`: stop starting trials once DURATION has passed since the
command started; trials already running finish and are recorded as usual. For a batch job with a
wall-time limit (SLURM's --time), a laptop that must be free by morning, or a shared machine that
is handed back at a given hour: rather than a kill that loses the trials in flight, the sweep ends
between trials, says how many points are left, and exits with EXIT_TIME_LIMIT so that a job script
can tell "run me again" from "done" (0) and "some trials failed" (1). The same command, run again,
goes on where it stopped.

The limit is on starting, not on finishing: a trial started just before the limit runs to its end,
so leave one trial's time (the sweep's ETA line shows it) between the limit and the hard deadline.
"""

from __future__ import annotations

import re
import time
from typing import Optional

from grpo_core.util.errors import UserInputError

EXIT_TIME_LIMIT = 3  # points left because --stop-after stopped the sweep: run the same command again
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(text: str, flag: str = "--stop-after") -> float:
    """Seconds from "5400", "90m", "1.5h", "1h30m" or "45s"; a one-line UserInputError otherwise."""
    value = str(text).strip().lower()
    seconds: Optional[float] = None
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        seconds = float(value)
    elif value and (m := _DURATION.fullmatch(value)) is not None:
        seconds = sum(float(n) * _UNITS[u] for n, u in zip(m.groups(), "hms") if n is not None)
    if seconds is None or not seconds > 0 or seconds == float("inf"):
        raise UserInputError(
            f"{flag}: got {text!r}; allowed: a duration > 0 such as 5400 (seconds), 90m, 1.5h or 1h30m"
        )
    return seconds


def check_duration(value: float | str, flag: str = "--stop-after") -> float:
    """A limit given as seconds or as text ("90m"), checked: seconds > 0."""
    if isinstance(value, str):
        return parse_duration(value, flag)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise UserInputError(f"{flag}: got {value!r}; allowed: a duration > 0 (seconds, or such as 90m)")
    return float(value)


def now() -> float:
    """The clock the limit is read on: wall time, the same in the sweep and its worker processes."""
    return time.time()


def may_start(start_until: Optional[float]) -> bool:
    """Whether a worker may claim another trial: always without a limit."""
    return start_until is None or now() < start_until
