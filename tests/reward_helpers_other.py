"""A second module with a reward function named like one in reward_helpers (`constant`)."""


def constant(completions, **kwargs):
    return [0.5] * len(completions)
