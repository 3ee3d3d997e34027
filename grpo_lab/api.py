"""grpo-lab from Python: the entry points a notebook uses. `grpo train`, `grpo sweep` and the
report are built on these (grpo_lab/cli.py).

    import grpo_lab

    cfg = grpo_lab.config(task="addition", max_steps=30, loss_type="dr_grpo")   # validated GRPOConfig
    run = grpo_lab.train(cfg, out="results/local/runs/mine")                    # a Run
    run.summary["steps_to_learn"], run.metrics[-1]["reward"], run.completions[:2]
    run.dataframe()                                                              # pandas, one row per step

    sweep = grpo_lab.sweep("experiments/example-grid.yaml", workers=2)          # a Sweep
    sweep.trials, sweep.runs()
    for v in grpo_lab.verdicts("experiments/c2_warmup.yaml", "results/local/reproduce/runs"):
        print(v.statement, v.verdict)

Bad input raises grpo_core.util.errors.UserInputError (ConfigError for a config key) with the one line
the command prints; nothing is written before the input is checked.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Optional

from grpo_core.util import defaults
from grpo_core.config.schema import GRPOConfig
from grpo_core.util.errors import UserInputError

__all__ = ["GRPOConfig", "Run", "Sweep", "config", "read_run", "report", "sweep", "train", "trials", "verdicts"]


def config(path: Optional[str | Path] = None, **values: Any) -> GRPOConfig:
    """A validated config: the defaults, then the YAML file at `path` (any subset of the keys),
    then `values`. Unknown keys and bad values raise ConfigError naming the key and what is allowed."""
    from grpo_core.config.loading import config_from_dict
    from grpo_core.util.yaml_files import read_yaml_mapping

    data = dict(read_yaml_mapping(path)) if path is not None else {}
    data.update(values)
    return config_from_dict(data, source=str(path) if path is not None else "grpo_lab.config")


@dataclasses.dataclass
class Run:
    """One run's folder, read back: its config, its summary (status, steps_to_learn, baseline,
    final reward, provenance), its metrics (one dict per step) and its logged completions."""

    folder: Path
    config: dict
    summary: dict
    metrics: list[dict]
    completions: list[dict]

    @property
    def steps_to_learn(self) -> Optional[int]:
        return self.summary.get("steps_to_learn")

    def dataframe(self):
        """The metrics as a pandas DataFrame indexed by step."""
        import pandas as pd

        return pd.DataFrame(self.metrics).set_index("step")


def read_run(folder: str | Path) -> Run:
    """A run folder (config.yaml, metrics.jsonl, summary.json, completions.jsonl) as a Run; a run that
    is still going or was killed reads what it wrote (its summary says which, or is empty). A file
    that cannot be read as what it should hold raises UserInputError naming it."""
    from grpo_core.util.files import read_mapping_named
    from grpo_core.run import COMPLETIONS, read_metrics_lenient

    folder = Path(folder)
    if not (folder / "config.yaml").is_file():
        raise UserInputError(f"{folder}: not a run folder (no config.yaml); allowed: a folder `grpo train` wrote")
    summary, metrics, completions = (folder / name for name in ("summary.json", "metrics.jsonl", COMPLETIONS))
    return Run(
        folder=folder,
        config=read_mapping_named(folder / "config.yaml", "yaml"),
        summary=read_mapping_named(summary) if summary.is_file() else {},
        metrics=read_metrics_lenient(metrics) if metrics.is_file() else [],
        completions=read_metrics_lenient(completions) if completions.is_file() else [],
    )


def default_run_folder(cfg: GRPOConfig) -> Path:
    """Where a run goes without `out`: results/local/runs/<run name>-<time>, or a resumed run's own folder."""
    if cfg.resume_from_checkpoint:
        return Path(cfg.resume_from_checkpoint).parent
    return Path(defaults.RUNS) / f"{cfg.run_name or cfg.default_run_name()}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(
    cfg: GRPOConfig | str | Path | None = None,
    out: Optional[str | Path] = None,
    *,
    mlflow: bool = False,
    progress: bool = False,
    **values: Any,
) -> Run:
    """Train one run into `out` and return it read back. `cfg`: a GRPOConfig, a YAML path or None
    (the defaults); `values` override keys of either. `mlflow`: also record it in
    cfg.mlflow_tracking_uri (as `grpo train` does unless --no-mlflow). A run resumed from a
    checkpoint (resume_from_checkpoint) goes on in the checkpoint's folder unless `out` says otherwise."""
    from grpo_core.config.loading import config_from_dict
    from grpo_core.config.validation import check_inputs
    from grpo_core.util.cpu_math import check_process
    from grpo_core.run import run_training

    if isinstance(cfg, GRPOConfig):  # built in Python, perhaps by hand: every key is checked as in a file
        cfg = config_from_dict({**cfg.to_dict(), **values}, source="grpo_lab.train")
    else:
        cfg = config(cfg, **values)
    check_inputs(cfg)  # the dataset, the reward functions, a checkpoint, the model: as `grpo train` checks them
    check_process(cfg.cpu_math)  # the logged cpu_math must be the one this process computes with
    folder = Path(out) if out is not None else default_run_folder(cfg)
    resume_dir = Path(cfg.resume_from_checkpoint).parent if cfg.resume_from_checkpoint else None
    in_place = resume_dir is not None and folder.resolve() == resume_dir.resolve()
    if not mlflow:
        run_training(cfg, folder, progress=progress, allow_existing=in_place)
        return read_run(folder)
    from grpo_core.logged_run import train_logged
    from grpo_core.mlflow_store import check_tracking_uri

    check_tracking_uri(cfg.mlflow_tracking_uri, flag="mlflow_tracking_uri")
    train_logged(cfg, folder, progress=progress, allow_existing=in_place)  # the MLflow run starts with training
    return read_run(folder)


@dataclasses.dataclass
class Sweep:
    """A sweep's trials as its Optuna study holds them: number, state, params, value (the objective,
    censored runs counted as the spec says) and run folder."""

    name: str
    trials: list[dict]
    exit_code: int = 0

    def runs(self) -> list[Run]:
        """The finished trials' run folders, read back."""
        return [
            read_run(t["run_dir"])
            for t in self.trials
            if t["state"] == "COMPLETE" and t.get("run_dir") and Path(t["run_dir"], "summary.json").is_file()
        ]


def sweep(
    spec: str | Path,
    *,
    workers: int = 1,
    storage: Optional[str] = None,
    tracking_uri: Optional[str] = None,
    out_root: str | Path = defaults.SWEEPS,
    stop_after: float | str | None = None,
) -> Sweep:
    """Run (or resume) the sweep of a spec file, as `grpo sweep` does, and return its trials. With
    workers > 1 the trials run in worker processes of their own. `stop_after` (seconds, or "90m"):
    start no trial after that long, as `--stop-after`; exit_code 3 when points are left."""
    from sweeps.driving.driver import run_sweep

    code = run_sweep(
        str(spec),
        workers=workers,
        storage_url=storage,
        tracking_uri=tracking_uri,
        out_root=str(out_root),
        stop_after=stop_after,
    )
    return trials(spec, storage=storage, exit_code=code)


def trials(spec: str | Path, *, storage: Optional[str] = None, exit_code: int = 0) -> Sweep:
    """A sweep's trials, read from its study (nothing runs): the checks and the one-line errors of
    `grpo trials`."""
    from sweeps.driving.trials import load_sweep_study

    loaded, study = load_sweep_study(spec, storage)
    rows = [
        {
            "number": t.number,
            "state": t.state.name,
            "params": dict(t.params),
            "value": t.values[0] if t.values and t.state.name == "COMPLETE" else None,
            "values": list(t.values) if t.values and t.state.name == "COMPLETE" else None,
            "run_dir": t.user_attrs.get("run_dir"),
            "error": t.user_attrs.get("error"),
        }
        for t in study.get_trials(deepcopy=False)
    ]
    return Sweep(name=loaded.name, trials=rows, exit_code=exit_code)


def verdicts(spec: str | Path, runs_root: str | Path, figures: Optional[str | Path] = None) -> list:
    """The verdicts of a claim spec computed from the finished run folders under
    runs_root/<spec name>/ (sweeps/deciding/verdicts.py): each with .statement, .verdict, .reason, .table and
    .facts (pairs per seed set, the smallest effect detectable with 80% power, the control arm's
    median). Each test on steps_to_learn is followed by its twin on reward AUC. The testbed's
    placebo and positive-control gates are applied by `report`, not here (one spec alone).
    Figures go to `figures` (a temporary folder when None)."""
    import tempfile

    from sweeps.reporting.report import claim_section

    from sweeps.reporting.report_inputs import collect_runs
    from sweeps.report_spec import validate_report
    from sweeps.spec import load_spec

    loaded = load_spec(spec, check_points=False)
    validate_report(loaded)
    runs, unfinished = collect_runs(Path(runs_root), loaded)
    with tempfile.TemporaryDirectory() as tmp:
        fig_dir = Path(figures) if figures is not None else Path(tmp)
        _, results = claim_section(loaded, runs, unfinished, fig_dir, fig_dir, "grpo_lab.verdicts")
    return results


def report(
    experiments: Optional[str | Path] = None,
    out: Optional[str | Path] = None,
    *,
    real_cpu: bool = False,
    quick: bool = False,
) -> Path:
    """Write the report of the claim specs in `experiments` (default: experiments/, or
    experiments/real/cpu/ with real_cpu) from their run folders as they are, training nothing
    (`grpo reproduce --report-only`): under `out`/runs/ when `out` is given, else where `grpo
    reproduce` keeps them. Returns the REPORT.md written."""
    from sweeps.paths import REAL_CPU_RESULTS
    from sweeps.reporting.reproduce import reproduce

    reproduce(
        quick=quick,
        experiments=str(experiments) if experiments is not None else None,
        out=str(out) if out is not None else None,
        real_cpu=real_cpu,
        report_only=True,
    )
    if out is not None:
        return Path(out) / "REPORT.md"
    if real_cpu:
        return REAL_CPU_RESULTS / "REPORT.md"
    return Path(defaults.QUICK if quick else "results") / "REPORT.md"
