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

from grpo_core.util.moved import keep_old_names

MOVED_ENTRY_POINTS = {f"{__name__}.power": f"{__name__}.deciding.power"}  # old `python -m` name: where it lives
keep_old_names(MOVED_ENTRY_POINTS)
