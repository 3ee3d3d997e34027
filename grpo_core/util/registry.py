"""A registry: the named implementations of one variant axis (verl's register_policy_loss and
register_adv_est are the model). The names are the values its config key allows; registering a
name twice fails, so a second definition can never silently replace the first. No imports: the
modules that implement the axes own their registries, and `grpo_core/algo/axes.py` lists them."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional


class Registry:
    """name -> implementation (a function, or the small record an axis needs), each with a one-line
    note for the docs' table and, optionally, `check(cfg)`: why this name cannot run with the rest of
    a config (a message naming what is allowed), or None."""

    def __init__(self, key: str):
        self.key = key  # the config key (or, for a registry the config reaches through another, its label)
        self._entries: dict[str, Any] = {}
        self.notes: dict[str, str] = {}
        self.checks: dict[str, Callable[[Any], Optional[str]]] = {}

    def add(self, name: str, impl: Any, note: str = "", check: Optional[Callable[[Any], Optional[str]]] = None) -> Any:
        if name in self._entries:
            raise ValueError(
                f"{self.key}: {name!r} is registered already (by {_label(self._entries[name])}); allowed: a new name"
            )
        self._entries[name], self.notes[name] = impl, note
        if check is not None:
            self.checks[name] = check
        return impl

    def register(self, name: str, note: str = "", check: Optional[Callable[[Any], Optional[str]]] = None):
        """Decorator: `@REGISTRY.register("name", "what it does")` over the implementing function."""
        return lambda impl: self.add(name, impl, note, check)

    def get(self, name: str) -> Any:
        if name not in self._entries:
            raise ValueError(f"{self.key}: unknown value {name!r}; allowed: {', '.join(self._entries)}")
        return self._entries[name]

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.key!r}: {', '.join(self._entries)})"


def _label(impl: Any) -> str:
    return getattr(impl, "__qualname__", None) or repr(impl)
