"""Named arms: a grid whose variants are not every combination of its axes.

A claim sometimes compares arms that differ in more than one key: warmup on (a ramp to the peak
learning rate), warmup off (the peak from the first step) and the LR-matched arm (no ramp, a
constant rate equal to the ramp's mean) differ in `warmup_ratio` and `learning_rate`, and their
product would add a fourth arm nobody asked for. A spec names them instead:

    arms:
      warmup:     {warmup_ratio: 0.19, learning_rate: 1.5e-5}
      no_warmup:  {warmup_ratio: 0.0,  learning_rate: 1.5e-5}
      lr_matched: {warmup_ratio: 0.0,  learning_rate: 1.35e-5}

and the grid gains the axis `arm` (every arm, in this order, unless `grid.arm` lists some), which
crosses with the other axes and the seeds as any axis does. Every arm sets the same keys, which
are config keys outside `base`, the other axes and the search, so a run's config tells its arm
back (`arm_of`): run folders, reports and resumed sweeps read the arm from the values it set. A
report's test compares arms as it compares the values of any axis (`axis: arm`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from grpo_core.util.errors import UserInputError, short_value

ARM = "arm"  # the grid axis of named arms; not a config key


def parse_arms(path: str, raw: Any, taken: set, coerce: Callable[[str, Any, str], Any]) -> dict:
    """The spec's `arms` (name -> {config key: value}), checked: a non-empty mapping of names to
    mappings that all set the same config keys, none in `taken` (base, grid and search keys), and
    no two arms alike. `coerce(key, value, where)` reads a value as its config key's type."""
    from grpo_core.config.schema import FIELD_NAMES

    def err(where: str, message: str) -> UserInputError:
        return UserInputError(f"{path}: {where}: {message}")

    if not isinstance(raw, dict) or not raw:
        raise err(
            "arms",
            f"{short_value(raw)}; allowed: a mapping of arm names to mappings of config keys, "
            f"e.g. {{warmup: {{warmup_steps: 10}}, no_warmup: {{warmup_steps: 0}}}}",
        )
    arms, keys = {}, None
    for name, values in raw.items():
        if not isinstance(name, str) or not name[:1].isalnum() or not all(c.isalnum() or c in "-_." for c in name):
            raise err(
                f"arms.{name}", "allowed: a name of letters, digits, '-', '_' and '.', starting with a letter or digit"
            )
        if not isinstance(values, dict) or not values:
            raise err(f"arms.{name}", f"{short_value(values)}; allowed: a non-empty mapping of config keys to values")
        if keys is None:
            keys = list(values)
        if set(values) != set(keys):
            odd = sorted(set(values) ^ set(keys))[0]
            raise err(
                f"arms.{name}.{odd}",
                f"every arm sets the same keys ({', '.join(keys)}), so that a run's "
                f"config tells its arm; allowed: those keys",
            )
        for key in values:
            if key not in FIELD_NAMES or key in ("seed", "cpu_math"):
                raise err(f"arms.{name}.{key}", "unknown key; allowed: config keys except seed and cpu_math")
            if key in taken:
                raise err(f"arms.{name}.{key}", "is also in base, grid or search; keep it in one place")
        arms[name] = {key: coerce(key, values[key], f"arms.{name}.{key}") for key in keys}
    seen: dict[str, str] = {}
    for name, values in arms.items():
        same = seen.setdefault(repr([values[k] for k in keys]), name)
        if same != name:
            raise err(f"arms.{name}", f"sets what arms.{same} sets; allowed: arms that differ in at least one value")
    return arms


def arm_axis(path: str, arms: dict, listed: Optional[list]) -> list:
    """The values of the grid axis `arm`: `grid.arm` as listed (arm names), or every arm."""
    if listed is None:
        return list(arms)
    unknown = [a for a in listed if not isinstance(a, str) or a not in arms]
    if unknown:
        raise UserInputError(f"{path}: grid.arm: {short_value(unknown[0])} is not an arm; allowed: {', '.join(arms)}")
    return list(listed)


def expand(arms: dict, params: dict) -> dict:
    """Grid params with `arm` replaced by the config values its arm sets."""
    if ARM not in params:
        return params
    return {**{k: v for k, v in params.items() if k != ARM}, **arms[params[ARM]]}


def arm_of(arms: dict, config: dict) -> Optional[str]:
    """The arm whose values a run's config records (None: no arm's). Raises KeyError where the
    config lacks a key the arms set."""
    from grpo_core.config.values import coerce_value

    for name, values in arms.items():
        if all(coerce_value(k, config[k]) == v for k, v in values.items()):
            return name
    return None


def describe(arms: dict) -> str:
    """One line per arm, for a report: `warmup: warmup_steps 17, learning_rate 1.5e-05`."""
    return "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in values.items()) for name, values in arms.items())
