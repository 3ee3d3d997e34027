"""Reading the project's YAML files (configs, sweep specs): a mapping with string keys, no
repeated key, no aliases, and a one-line error for everything else. Imports nothing heavy, so the
command line can read a config before torch loads (grpo_core/util/cpu_math.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpo_core.util.errors import UserInputError


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a repeated key (PyYAML keeps the last silently) and
    aliases (`*name`): a config needs none, and nested aliases expand exponentially."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                "an alias (*name); allowed: values written out (grpo-lab files take no YAML anchors or aliases)",
                self.peek_event().start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key) if isinstance(key, (str, int, float, bool)) else None
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping with string keys; one-line errors for every failure."""
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{path}: is a folder; allowed: a YAML file")
    if not path.is_file():
        raise UserInputError(f"{path}: no such file")
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except (UnicodeDecodeError, ValueError):
        raise UserInputError(f"{path}: not a text file; allowed: a YAML mapping of config keys") from None
    except OSError as exc:
        raise UserInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.reader.ReaderError as exc:  # a NUL or other control character
        raise UserInputError(
            f"{path}: not a YAML text file: character #x{exc.character:04x} at position "
            f"{exc.position} is not allowed; allowed: a YAML mapping of config keys"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise UserInputError(f"{path}: malformed YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    odd = [k for k in data if not isinstance(k, str)]
    if odd:
        raise UserInputError(f"{path}: key {odd[0]!r} is a {type(odd[0]).__name__}; allowed: names (strings)")
    return data


def parse_yaml_value(text: str) -> Any:
    """One `--set` value, parsed as YAML by the same rules (no aliases); raises yaml.YAMLError."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # an object written twice is written out twice: these files take no aliases
        return True


def dump_yaml(data: Any) -> str:
    """YAML text that read_yaml_mapping reads back (no anchors or aliases), keys in their order."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True)
