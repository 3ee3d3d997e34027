"""YAML values to a config key's declared type (int, float, bool, str, lists): one ConfigError
naming the key and the type otherwise. Used by files, `--set` overrides and sweep specs alike."""

from __future__ import annotations

import math
from typing import Any, get_args, get_origin

from grpo_core.config.schema import field_type
from grpo_core.util.errors import ConfigError, short_value  # noqa: F401  (short_value: its old home)
from grpo_core.util.yaml_files import parse_yaml_value

_INT_LIMIT = 2**63


def _finite_number(key: str, value: Any) -> float:
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range
            number = math.inf
    elif isinstance(value, str):  # PyYAML reads 1e-4 (no dot) as a string
        try:
            number = float(value)
        except ValueError:
            pass
    if number is None:
        raise ConfigError(key, f"expected a number, got {short_value(value)}")
    if not math.isfinite(number):  # 1e400 reads as inf, 10**400 does not fit a float
        raise ConfigError(key, f"got {short_value(value)}, which is not a finite number; allowed: a finite number")
    return number


def coerce_value(key: str, value: Any) -> Any:
    """Convert a YAML value to the field's type, or raise a ConfigError naming the type."""
    hint = field_type(key)
    optional = get_origin(hint) is not None and type(None) in get_args(hint)
    if optional:
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
            return None
        hint = next(a for a in get_args(hint) if a is not type(None))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected true or false, got {short_value(value)}")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ConfigError(key, f"expected an integer, got {short_value(value)}")
        if not -_INT_LIMIT <= value < _INT_LIMIT:  # torch, numpy and the OS take 64-bit integers
            raise ConfigError(key, f"got {short_value(value)}; allowed: an integer of magnitude below 2^63")
        return value
    if hint is float:
        return _finite_number(key, value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(key, f"expected a string, got {short_value(value)}")
    if get_args(hint) == (float,):  # list[float]: YAML numbers, or a flow list in a string (grid values)
        if isinstance(value, str):
            value = parse_yaml_value(value) if value.strip().startswith("[") else [value]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        if isinstance(value, list):
            return [_finite_number(key, v) for v in value]
        raise ConfigError(key, f"expected a list of numbers, got {short_value(value)}")
    if get_origin(hint) is list or hint is list:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(key, f"expected a list of strings, got {short_value(value)}")
    raise AssertionError(f"unhandled type for {key}: {hint}")
