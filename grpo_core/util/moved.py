"""Old module names kept working for one release after a module moved: importing the old name gives
the module where it lives now (the same object), and `python -m OLD` runs its code (runpy asks the
loader for it). `sweeps.power` → `sweeps.deciding.power`; `benchmarks.peer_check`, `peer_step` and
`trl_config` → the `grpo_peer` package."""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

MOVED: dict = {}  # old module name → where it lives now


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and hands over the module where it lives now."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=MOVED[fullname])

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass  # the module it hands over is already executed

    def get_code(self, fullname):
        target = MOVED[fullname]
        return importlib.util.find_spec(target).loader.get_code(target)


def keep_old_names(moved: dict) -> None:
    """Register `moved` (old name → new name), once per process."""
    MOVED.update(moved)
    if not any(isinstance(f, _MovedModule) for f in sys.meta_path):
        sys.meta_path.append(_MovedModule())
