"""A config from a YAML file, a dict, and `--set key=value` overrides: defaults, then the file (which
may be partial), then the overrides; each value coerced to its declared type, the whole validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpo_core.config.schema import FIELD_NAMES, GRPOConfig
from grpo_core.config.validation import check_inputs, validate
from grpo_core.config.values import coerce_value
from grpo_core.util.errors import ConfigError, UserInputError, remember_secrets
from grpo_core.util.yaml_files import parse_yaml_value, read_yaml_mapping


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` with the value parsed as a YAML scalar."""
    if "=" not in text:
        raise UserInputError(f"--set {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = parse_yaml_value(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def unknown_key(key: Any, source: str) -> ConfigError:
    """'unknown key', with the closest known keys as a suggestion (the full list is in the README)."""
    import difflib

    close = difflib.get_close_matches(str(key), FIELD_NAMES, n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(repr(c) for c in close)}?"
        if close
        else "see `python -m grpo_core.config.doc` or the README's config reference for the allowed keys"
    )
    return ConfigError(str(key), f"unknown key in {source}; {hint}")


def config_from_dict(values: dict[str, Any], source: str = "config") -> GRPOConfig:
    unknown = sorted((k for k in values if k not in FIELD_NAMES), key=str)
    if unknown:
        raise unknown_key(unknown[0], source)
    remember_secrets(*(v for v in values.values() if isinstance(v, str)))  # masked wherever they show later
    kwargs = {k: coerce_value(k, v) for k, v in values.items()}
    return validate(GRPOConfig(**kwargs))


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), inputs: bool = True
) -> GRPOConfig:
    """Defaults, then the YAML file (may be partial), then `--set key=value` overrides; validated,
    and its inputs checked (check_inputs) unless `inputs` is false (`grpo train` leaves that to
    grpo_lab.train, the one path a command and a notebook share)."""
    values: dict[str, Any] = read_yaml_mapping(path) if path is not None else {}
    source = str(path) if path is not None else "config"
    seen = set()
    for text in overrides:
        key, value = parse_override(text)
        if key not in FIELD_NAMES:
            raise unknown_key(key, "--set")
        if key in seen:
            raise UserInputError(f"--set {key}: given twice; allowed: each key once")
        seen.add(key)
        values[key] = value
    cfg = config_from_dict(values, source)
    if inputs:
        check_inputs(cfg)
    return cfg
