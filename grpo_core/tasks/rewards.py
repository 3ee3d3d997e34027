"""Reward functions with TRL's signature: `fn(completions, **columns) -> list[float]`.

`completions` is a list of completion strings; dataset columns (e.g. `answer`) and `prompts`
arrive as keyword lists of the same length. Users add their own by import path
`package.module:function` in `reward_funcs`.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import numbers
import re
from typing import Callable

from grpo_core.util.errors import ConfigError, RunFailure
from grpo_core.util.registry import Registry

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


_FINAL_ANSWER = re.compile(r"<answer>\s*-?[\d.,/]+\s*</answer>\s*$", re.DOTALL)
_THINK_BEFORE = re.compile(r"<think>.+?</think>\s*<answer>", re.DOTALL)


def answer_format(completions: list[str], **kwargs) -> list[float]:
    """Partial credit for the R1 shape: 0.5 when the completion ends with `<answer>N</answer>`
    holding a number, plus 0.5 when a non-empty `<think>…</think>` comes right before it. A
    signal a small instruct model can climb, where the strict 0/1 think_answer_format stays 0."""
    out = []
    for c in completions:
        score = 0.5 if _FINAL_ANSWER.search(c) else 0.0
        if score and _THINK_BEFORE.search(c):
            score += 0.5
        out.append(score)
    return out


# One rule reads a number, in a completion and in a gold answer alike: an optional minus, digits with
# optional thousands separators (`1,234`: groups of exactly three after the first), an optional
# decimal part and an optional exponent (`1e3`, `2.5E-2`). `1,2345` is the numbers 1 and 2345.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
NUMBER_RULE = "one number: digits, optional thousands separators (1,234), decimal part and exponent (1e3)"


def read_number(text: str) -> float | None:
    """The number `text` is as a whole (stripped), by the rule above, or None."""
    text = str(text).strip()
    return float(text.replace(",", "")) if _NUMBER.fullmatch(text) else None


def last_number(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the last number written in the (extracted) answer equals the reference number, both
    read by one rule (`read_number`). Stricter than math_answer, which evaluates what it parses: a
    reply that restates the question's sum (`15+13 =`, `2 + 18 is a classic problem`) scores 1 there
    and 0 here (results/real/cpu/: the real model's climb on math_answer is partly that echo)."""
    out = []
    for completion, gold in zip(completions, answer):
        numbers = _NUMBER.findall(extract_answer(completion))
        target = read_number(gold)  # None: a reference that is not one number (refused before training)
        out.append(1.0 if numbers and target is not None and read_number(numbers[-1]) == target else 0.0)
    return out


def unscorable(name: str, answers: list) -> list[int] | None:
    """The indices of the answers the built-in reward `name` can never pay for (last_number: not one
    number by its rule; exact_match, math_answer: empty, which exact_match would pay an empty
    completion for), or None for a reward that reads no answer or is not built in."""
    if name == "last_number":
        return [i for i, a in enumerate(answers) if read_number(a) is None]
    if name in ("exact_match", "math_answer"):
        return [i for i, a in enumerate(answers) if not str(a).strip()]
    return None


def check_answers(names: list[str], answers: list, source: str) -> None:
    """Refuse, in one line, a task whose answers a reward it is scored by cannot score."""
    for name in names:
        bad = unscorable(name, answers)
        if bad:
            allowed = NUMBER_RULE if name == "last_number" else "a non-empty answer in every row"
            raise ConfigError(
                "reward_funcs",
                f"{name} cannot score {len(bad)} of the {len(answers)} answers of "
                f"{source} (row {bad[0] + 1}: {str(answers[bad[0]])[:40]!r}); "
                f"allowed: {allowed}",
            )


# rewards that pay for restating an arithmetic question: math-verify evaluates the `15+13` of `15+13 =`
# to the sum, so part of a climb on them is the model learning to echo (the real-model report keeps
# claims resting on them apart, in an appendix)
PAYS_FOR_ECHO = frozenset({"math_answer"})

REWARD_FUNCS: dict[str, RewardFunc] = {
    "exact_match": exact_match,
    "format_digits": format_digits,
    "math_answer": math_answer,
    "last_number": last_number,
    "think_answer_format": think_answer_format,
    "answer_format": answer_format,
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
    check_import_allowed(name, module_name)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError or an error inside the user's module
        raise ConfigError("reward_funcs", f"cannot import {module_name!r} for {name!r}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError("reward_funcs", f"{module_name!r} has no function {func_name!r}; {allowed}")
    return func


# A reward's import path runs the module's top-level code when it is imported, as a Hydra `_target_`
# does: a spec or config is code. So a module is imported only where it lies in this project (the
# folder the command runs in, or this repository, outside any installed environment), or where the
# user asks for it by setting TRUST_IMPORTS=1 in the environment (never in a spec or a config).
TRUST_IMPORTS = "GRPO_TRUST_IMPORTS"


def _project_roots() -> list:
    from pathlib import Path

    return [Path.cwd().resolve(), Path(__file__).resolve().parents[2]]


def _installed_roots() -> list:
    import sys
    from pathlib import Path

    return [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]


def check_import_allowed(name: str, module_name: str) -> None:
    """Before anything is imported: the module's top-level package is found (finding runs none of
    its code) and lies in this project, or the user trusts imports (TRUST_IMPORTS=1)."""
    import importlib.util
    from pathlib import Path

    if os.environ.get(TRUST_IMPORTS) == "1":
        return
    top = module_name.split(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise ConfigError("reward_funcs", f"cannot import {top!r} for {name!r}: no module named {top!r}")
    origin = found.origin if found.origin not in (None, "built-in", "frozen") else None
    if origin is None and found.submodule_search_locations:
        origin = next(iter(found.submodule_search_locations), None)
    where = Path(origin).resolve() if origin else None
    inside = (
        where is not None
        and any(where.is_relative_to(r) for r in _project_roots())
        and not any(where.is_relative_to(r) for r in _installed_roots())
    )
    if not inside:
        raise ConfigError(
            "reward_funcs",
            f"{name!r} names the module {top!r} ({where or 'built into Python'}), "
            f"outside this project: importing it runs its code; allowed: a built-in "
            f"reward, a module in this folder or repository, or {TRUST_IMPORTS}=1 in "
            f"the environment to import installed modules",
        )


def check_reward_list(names: list[str]) -> None:
    """Without importing anything: no function listed twice."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(
            "reward_funcs",
            f"{repeated[0]!r} is listed twice; allowed: each reward function once "
            f"(rewards are summed: list a function once per term)",
        )


def check_reward_names(names: list[str]) -> None:
    """Every listed function resolves (a built-in name, or module:function that imports)."""
    check_reward_list(names)
    for name in names:
        resolve_reward(name)


def reward_names(names: list[str]) -> list[str]:
    """Metric suffixes for `rewards/<name>`: the function name for an import path, unless two
    functions share it (mod_a:score, mod_b:score), then the dotted path (mod_a.score, mod_b.score)."""
    short = [n.split(":")[-1] for n in names]
    return [s if short.count(s) == 1 else n.replace(":", ".") for n, s in zip(names, short)]


def combine_rewards(per_func: dict[str, list[float]], weights: list[float]) -> list[float]:
    """Each completion's reward: Σ_f weight_f × reward_f over the functions in order (TRL's
    reward_weights); with no weights, the plain sum."""
    if not weights:
        return [sum(values) for values in zip(*per_func.values())]
    return [sum(w * x for w, x in zip(weights, values)) for values in zip(*per_func.values())]


# multi_objective_aggregation -> how the reward functions' values become the one reward per completion that
# the advantages start from: (per_func {name: B values}, weights, G) -> (B,) float32 tensor, groups contiguous.
# The logged `reward` is the weighted sum in every case (what the policy earns), as TRL logs it.
REWARD_AGGREGATIONS = Registry("multi_objective_aggregation")


@REWARD_AGGREGATIONS.register("sum_then_normalize", "Σ weight × reward, then the advantage stages (TRL's default)")
def sum_then_normalize(per_func: dict[str, list[float]], weights: list[float], num_generations: int):
    import torch

    return torch.tensor(combine_rewards(per_func, weights), dtype=torch.float32)  # (B,)


def _batch_scaling(cfg):
    if cfg.scale_rewards != "batch":
        return (
            f"got normalize_then_sum with scale_rewards {cfg.scale_rewards!r}; allowed: normalize_then_sum with "
            f"scale_rewards batch (TRL divides the sum of the normalized rewards by the batch's std, whatever "
            f"scale_rewards says)"
        )
    return None


@REWARD_AGGREGATIONS.register(
    "normalize_then_sum",
    "each function's rewards normalized within the group, "
    "(r − mean) / (std + 1e-4), then Σ weight × normalized reward, "
    "then the advantage stages with scale_rewards batch (TRL's; GDPO)",
    check=_batch_scaling,
)
def normalize_then_sum(per_func: dict[str, list[float]], weights: list[float], num_generations: int):
    """A function whose values vary little in a group weighs as much as one that varies a lot. Each
    group's sum has mean 0 (up to rounding), so grpo's group-mean baseline is TRL's batch mean here."""
    import torch

    values = torch.tensor(list(per_func.values()), dtype=torch.float32).T  # (B, K)
    grouped = values.view(-1, num_generations, values.shape[1])  # (num_groups, G, K)
    normalized = (grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std(dim=1, keepdim=True) + 1e-4)
    w = torch.tensor(weights or [1.0] * values.shape[1], dtype=torch.float32)  # (K,)
    return (normalized.reshape(values.shape) * w).sum(dim=1)  # (B,)


def overlong_penalty(lengths: list[int], max_completion_length: int, buffer_len: int, factor: float) -> list[float]:
    """DAPO's soft overlong punishment (arXiv 2503.14476; verl's overlong_buffer, OpenRLHF's
    overlong_buffer_len and overlong_penalty_factor): 0 up to max_completion_length − buffer_len
    tokens, then falling linearly to −factor at max_completion_length, added to the reward the
    advantages start from (beside mask_truncated_completions, which drops cut rows instead)."""
    expected = max_completion_length - buffer_len
    return [min(-(n - expected) / buffer_len * factor, 0.0) for n in lengths]


def compute_rewards(
    funcs: dict[str, RewardFunc],
    completions: list[str],
    columns: dict[str, list],
) -> dict[str, list[float]]:
    """Call every reward function; a failure names the function and the completion."""
    out: dict[str, list[float]] = {}
    for name, func in funcs.items():
        try:
            with _process_exit_raises():
                # copies: a reward that changes its arguments in place (clear(), sort()) must not change
                # what the next reward function, the advantages and the log see
                raw = list(func(list(completions), **{k: list(v) for k, v in columns.items()}))
        except ProcessExitCalled as exc:  # os._exit() would end the process with no record of the run
            raise RunFailure(
                f"reward function {name} called os._exit({exc.code}); allowed: a reward returns its "
                f"values (it must not end the training process)"
            ) from None
        except (Exception, SystemExit) as exc:  # sys.exit() in a reward fails the run, naming it; never exits
            raise RunFailure(_locate_failure(name, func, completions, columns, exc)) from None
        out[name] = check_values(name, raw, completions)
    return out


class ProcessExitCalled(BaseException):
    """os._exit() called by a reward function (raised instead, while rewards are computed)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def _process_exit_raises():
    """While a reward function runs, os._exit raises ProcessExitCalled instead of ending the
    process at once (no summary, no MLflow end: the run would be lost, recorded as running)."""
    real = os._exit

    def refuse(code=0):
        raise ProcessExitCalled(code)

    os._exit = refuse
    try:
        yield
    finally:
        os._exit = real


# The largest |reward| a function may return. Rewards enter float32 tensors, whose largest value is
# 3.4e38; a group's variance squares them (1e19 squared overflows), and the baseline sums hundreds of
# them: 1e308 was finite as a Python float, became inf there, and the baseline's standard error
# (nan) then asked for one more prompt at a time up to its cap before the run failed.
REWARD_LIMIT = 1e15


def check_values(name: str, raw: list, completions: list[str]) -> list[float]:
    """One finite number per completion, |value| ≤ REWARD_LIMIT, or a RunFailure naming the
    function and the completion."""
    if len(raw) != len(completions):
        raise RunFailure(f"reward function {name} returned {len(raw)} values for {len(completions)} completions")
    wrong = [i for i, v in enumerate(raw) if not isinstance(v, numbers.Real)]
    if wrong:  # "1.0" would pass float() and hide a bug in the reward function
        i = wrong[0]
        raise RunFailure(
            f"reward function {name} returned {raw[i]!r} ({type(raw[i]).__name__}) for completion "
            f"{i}: {completions[i]!r}; allowed: numbers"
        )
    values = [float(v) for v in raw]
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        raise RunFailure(
            f"reward function {name} returned {values[bad[0]]} (non-finite) for "
            f"completion {bad[0]}: {completions[bad[0]]!r}"
        )
    huge = [i for i, v in enumerate(values) if abs(v) > REWARD_LIMIT]
    if huge:
        raise RunFailure(
            f"reward function {name} returned {values[huge[0]]:g} for completion {huge[0]}: "
            f"{completions[huge[0]]!r}; allowed: numbers of absolute value ≤ {REWARD_LIMIT:g} (the "
            f"advantages are computed in float32)"
        )
    return values


def _locate_failure(name, func, completions, columns, exc) -> str:
    for i, completion in enumerate(completions):
        try:
            func([completion], **{k: [v[i]] for k, v in columns.items()})
        except (Exception, SystemExit) as one:
            return f"reward function {name} raised {type(one).__name__}: {one} on completion {i}: {completion!r}"
    return f"reward function {name} raised {type(exc).__name__}: {exc}"
