"""Reward functions that tests load by import path (`reward_helpers:<name>`)."""


def constant(completions, **kwargs):
    """Every completion gets 1.0: zero variance in every group (TRL issue #3857)."""
    return [1.0] * len(completions)


def explode_on_seven(completions, **kwargs):
    """Raises on purpose for completions that contain a 7."""
    out = []
    for c in completions:
        if "7" in c:
            raise ValueError("seven is not allowed")
        out.append(0.0)
    return out


def always_raises(completions, **kwargs):
    raise RuntimeError("reward server unavailable")


def nan_reward(completions, **kwargs):
    return [float("nan")] * len(completions)


def huge_reward(completions, **kwargs):
    return [1e308] * len(completions)  # finite as a Python float, inf in float32


def interrupt(completions, **kwargs):
    """Simulates Ctrl-C during a step."""
    raise KeyboardInterrupt


def negative_length(completions, **kwargs):
    """Shorter is better: has spread even for an untrained model."""
    return [-float(len(c)) for c in completions]


def string_reward(completions, **kwargs):
    """A bug a user can make: numbers as strings (float() would accept them silently)."""
    return ["1.0"] * len(completions)


def exit_three(completions, **kwargs):
    """A reward that ends the process (a script's sys.exit left in a library function)."""
    import sys

    sys.exit(3)


def os_exit_zero(completions, **kwargs):
    """A reward that ends the process at once, with success (os._exit: no cleanup, no exception)."""
    import os

    os._exit(0)


class _Opaque:
    """A value that cannot be pickled (it holds a lock), so a worker process cannot send it back."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def __float__(self):
        return 1.0


def unpicklable(completions, **kwargs):
    return [_Opaque() for _ in completions]


def sleepy(completions, **kwargs):
    """Slower than any reward_timeout a test sets."""
    import time

    time.sleep(30)
    return [0.0] * len(completions)


def held_exact_match(completions, answer, **kwargs):
    """exact_match, but each call waits while the file named by GRPO_TEST_HOLD exists (after touching
    `<that file>.<pid>`, so a test sees which processes wait): a test stops trials mid-run, then kills
    them, however slowly its machine schedules it."""
    import os
    import time
    from pathlib import Path

    hold = os.environ.get("GRPO_TEST_HOLD")
    if hold and os.path.exists(hold):
        Path(f"{hold}.{os.getpid()}").touch()
        while os.path.exists(hold):
            time.sleep(0.05)
    from grpo_core.tasks.rewards import exact_match

    return exact_match(completions, answer)


def hold_at_next_reward(hold, alive, count: int = 1, timeout: float = 120.0) -> set[int]:
    """Create `hold` (the file GRPO_TEST_HOLD names for held_exact_match), then wait until `count`
    processes wait at a reward: their pids. `alive()` says whether the command under test still runs;
    a command that ended, or a wait past `timeout`, fails the test with what was seen."""
    import time
    from pathlib import Path

    hold = Path(hold)
    hold.touch()
    deadline = time.monotonic() + timeout
    while len(held := {int(p.suffix[1:]) for p in hold.parent.glob(f"{hold.name}.*")}) < count:
        assert alive() and time.monotonic() < deadline, f"{len(held)} of {count} process(es) held at a reward"
        time.sleep(0.1)
    return held
