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


def interrupt(completions, **kwargs):
    """Simulates Ctrl-C during a step."""
    raise KeyboardInterrupt


def negative_length(completions, **kwargs):
    """Shorter is better: has spread even for an untrained model."""
    return [-float(len(c)) for c in completions]


def string_reward(completions, **kwargs):
    """A bug a user can make: numbers as strings (float() would accept them silently)."""
    return ["1.0"] * len(completions)
