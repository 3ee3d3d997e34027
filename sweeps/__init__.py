"""The sweeps: three wings, one job each, over a ground they share (docs/development/layout.md).

    reporting/   writing pages: a claim's report section, a search on one page, `grpo reproduce`
    driving/     running sweeps: Optuna studies, their storage, claims, workers, recovery, resumption
    deciding/    deciding verdicts from numbers: run folders read as plain data, statistics, power,
                 the replication rule, the gates, the peer check; no Optuna, MLflow or torch
    spec.py, arms.py, report_spec.py, paths.py: the ground (a sweep spec and its points, its named
                 arms, a claim spec's report section, where specs and runs live)

reporting may import driving and deciding; those two never import each other or reporting
(`lint-imports`, pyproject.toml). `python -m sweeps.power`, the name of the power command before the
wings, still runs it (sweeps/deciding/power.py)."""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

MOVED_ENTRY_POINTS = {f"{__name__}.power": f"{__name__}.deciding.power"}  # old `python -m` name: where it lives


class _MovedEntryPoint(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old entry point's name and hands over the module where it lives now: imported, the
    same module object; run with `python -m`, its code (runpy asks the loader for it)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED_ENTRY_POINTS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=MOVED_ENTRY_POINTS[fullname])

    def create_module(self, spec):
        return importlib.import_module(MOVED_ENTRY_POINTS[spec.name])

    def exec_module(self, module):
        pass  # the module it hands over is already executed

    def get_code(self, fullname):
        target = MOVED_ENTRY_POINTS[fullname]
        return importlib.util.find_spec(target).loader.get_code(target)


if not any(isinstance(f, _MovedEntryPoint) for f in sys.meta_path):
    sys.meta_path.append(_MovedEntryPoint())
