"""Reward functions with TRL's signature: `fn(completions, **columns) -> list[float]`.

`completions` is a list of completion strings; dataset columns (e.g. `answer`) and `prompts`
arrive as keyword lists of the same length. Users add their own by import path
`package.module:function` in `reward_funcs`.
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Callable

from .errors import ConfigError, RunFailure

RewardFunc = Callable[..., list]


def exact_match(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion, stripped of surrounding whitespace, equals the answer."""
    return [1.0 if c.strip() == a.strip() else 0.0 for c, a in zip(completions, answer)]


def format_digits(completions: list[str], **kwargs) -> list[float]:
    """1.0 when the completion is a non-empty string of digits (a format-only reward)."""
    return [1.0 if re.fullmatch(r"\d+", c.strip()) else 0.0 for c in completions]


_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK_ANSWER = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def extract_answer(completion: str) -> str:
    """The text inside the last <answer>…</answer>, else the whole completion."""
    found = _ANSWER.findall(completion)
    return found[-1].strip() if found else completion.strip()


def math_answer(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the extracted answer equals the reference mathematically (the `math-verify`
    package: numbers, fractions, LaTeX, sets…), else 0.0."""
    from math_verify import parse, verify

    rewards = []
    for completion, gold in zip(completions, answer):
        gold_parsed = parse(str(gold))
        predicted = parse(extract_answer(completion))
        rewards.append(1.0 if gold_parsed and predicted and verify(gold_parsed, predicted) else 0.0)
    return rewards


def think_answer_format(completions: list[str], **kwargs) -> list[float]:
    """1.0 when the completion is exactly `<think>…</think><answer>…</answer>` (whitespace aside)."""
    return [1.0 if _THINK_ANSWER.match(c) else 0.0 for c in completions]


REWARD_FUNCS: dict[str, RewardFunc] = {
    "exact_match": exact_match,
    "format_digits": format_digits,
    "math_answer": math_answer,
    "think_answer_format": think_answer_format,
}

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def resolve_reward(name: str) -> RewardFunc:
    """A registered name or `package.module:function`; ConfigError names what is allowed."""
    if name in REWARD_FUNCS:
        return REWARD_FUNCS[name]
    allowed = f"allowed: {', '.join(REWARD_FUNCS)}, or an import path package.module:function"
    if not _IMPORT_PATH.match(name):
        raise ConfigError("reward_funcs", f"unknown reward function {name!r}; {allowed}")
    module_name, func_name = name.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError or an error inside the user's module
        raise ConfigError("reward_funcs", f"cannot import {module_name!r} for {name!r}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError("reward_funcs", f"{module_name!r} has no function {func_name!r}; {allowed}")
    return func


def check_reward_names(names: list[str]) -> None:
    for name in names:
        resolve_reward(name)


def reward_name(name: str) -> str:
    """Metric suffix for `rewards/<name>`: the function name for import paths."""
    return name.split(":")[-1]


def compute_rewards(
    funcs: dict[str, RewardFunc],
    completions: list[str],
    columns: dict[str, list],
) -> dict[str, list[float]]:
    """Call every reward function; a failure names the function and the completion."""
    out: dict[str, list[float]] = {}
    for name, func in funcs.items():
        try:
            values = [float(v) for v in func(completions, **columns)]
        except Exception as exc:
            raise RunFailure(_locate_failure(name, func, completions, columns, exc)) from exc
        if len(values) != len(completions):
            raise RunFailure(f"reward function {name} returned {len(values)} values for "
                             f"{len(completions)} completions")
        bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
        if bad:
            raise RunFailure(f"reward function {name} returned {values[bad[0]]} (non-finite) for "
                             f"completion {bad[0]}: {completions[bad[0]]!r}")
        out[name] = values
    return out


def _locate_failure(name, func, completions, columns, exc) -> str:
    for i, completion in enumerate(completions):
        try:
            func([completion], **{k: [v[i]] for k, v in columns.items()})
        except Exception as one:
            return (f"reward function {name} raised {type(one).__name__}: {one} on completion {i}: "
                    f"{completion!r}")
    return f"reward function {name} raised {type(exc).__name__}: {exc}"
