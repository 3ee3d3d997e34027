"""A search's result on one page (`grpo report SPEC`): what the budget bought, the best trials with
their seeds' spread, each parameter's importance, the Pareto front where there are several
objectives, and the reward curves of the best runs. Read from the study and the run folders; it
trains nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from grpo_core.record.run_metrics import moving_average
from grpo_core.run import read_metrics_lenient
from grpo_core.util import defaults
from grpo_core.util.errors import UserInputError
from grpo_core.util.files import write_text_atomic

from ..spec import SweepSpec
from ..driving.trials import importance, importance_spread, importance_table, load_sweep_study

REPORTS = f"{defaults.LOCAL}/search-reports"  # default: one folder per search
BEST = 5  # trials in the best-trials table, and (at most) the Pareto front's curves


def seed_folders(out_root: str | Path, spec: SweepSpec, number: int) -> list[Path]:
    """A search trial's run folders, one per seed that ran (in the spec's seed order)."""
    trial = Path(out_root) / spec.name / f"trial-{number:04d}"
    return [trial / f"seed-{s}" for s in spec.seeds if (trial / f"seed-{s}").is_dir()]


def _metrics(folder: Path) -> list[dict]:
    """A seed's metrics.jsonl as read_run reads it (a last line cut mid-write left out); [] before its first step."""
    path = folder / "metrics.jsonl"
    return read_metrics_lenient(path) if path.is_file() else []


def trial_cost(out_root: str | Path, spec: SweepSpec, number: int) -> tuple[int, int, float]:
    """A trial's runs (one per seed that ran), their optimizer steps and their step times summed."""
    rows = [_metrics(folder) for folder in seed_folders(out_root, spec, number)]
    return len(rows), sum(len(r) for r in rows), sum(float(m.get("step_time", 0.0)) for r in rows for m in r)


def spent(study, spec: SweepSpec, out_root: str | Path) -> dict:
    """What the search cost: trials by state, runs and optimizer steps trained, training time (the
    runs' step times summed; pruned and failed runs included)."""
    states: dict[str, int] = {}
    runs = steps = 0
    seconds = 0.0
    for t in study.get_trials(deepcopy=False):
        states[t.state.name] = states.get(t.state.name, 0) + 1
        trial_runs, trial_steps, trial_seconds = trial_cost(out_root, spec, t.number)
        runs, steps, seconds = runs + trial_runs, steps + trial_steps, seconds + trial_seconds
    return {"states": states, "runs": runs, "steps": steps, "train_time_s": seconds}


def ranked(study, spec: SweepSpec) -> list:
    """The complete trials, best first (the first objective, in its direction)."""
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    sign = 1.0 if spec.direction == "minimize" else -1.0
    return sorted(complete, key=lambda t: (sign * t.values[0], t.number))


def pareto_front(study, spec: SweepSpec) -> list:
    """The trials no other complete trial beats on every objective (Optuna's best_trials), by number."""
    return sorted(study.best_trials, key=lambda t: t.number) if len(spec.all_objectives) > 1 else []


def _params(t, spec: SweepSpec) -> str:
    return ", ".join(
        f"{k}={t.params[k]:.3g}" if isinstance(t.params.get(k), float) else f"{k}={t.params.get(k)}"
        for k in [*spec.grid, *spec.search]
        if k in t.params
    )


def best_table(trials: list, spec: SweepSpec) -> list[str]:
    objectives = spec.all_objectives
    lines = [
        "| trial | parameters | "
        + " | ".join(f"{o} (mean)" for o in objectives)
        + f" | {spec.objective} per seed | spread (max − min) |",
        "|---|---|" + "---|" * len(objectives) + "---|---|",
    ]
    for t in trials:
        seeds = t.user_attrs.get("seed_values") or []
        spread = f"{max(seeds) - min(seeds):.3g}" if seeds else ""
        lines.append(
            f"| {t.number} | {_params(t, spec)} | "
            + " | ".join(f"{v:.4g}" for v in t.values)
            + f" | {', '.join(f'{v:g}' for v in seeds)} | {spread} |"
        )
    return lines


def pareto_png(study, spec: SweepSpec, front: list, path: Path) -> Path:
    """Every complete trial on the first two objectives; the front marked and joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    x, y = spec.all_objectives[:2]
    fig, ax = plt.subplots(figsize=(5.5, 4), dpi=100)
    ax.scatter([t.values[0] for t in complete], [t.values[1] for t in complete], s=18, color="grey", label="trials")
    pts = sorted((t.values[0], t.values[1]) for t in front)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="C3", label="Pareto front")
    for t in front:
        ax.annotate(str(t.number), (t.values[0], t.values[1]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(f"{x} ({spec.all_directions[0]})")
    ax.set_ylabel(f"{y} ({spec.all_directions[1]})")
    ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.13, top=0.96)
    fig.savefig(path)
    plt.close(fig)
    return path


def curves_png(trials: list, spec: SweepSpec, out_root: str | Path, path: Path) -> Optional[Path]:
    """The reward's moving average (stl_window) per step of each seed of each trial, a colour per trial."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = spec.config_for({"seed": spec.seeds[0]}).stl_window
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=100)
    drawn = False
    for colour, t in enumerate(trials):
        for i, folder in enumerate(seed_folders(out_root, spec, t.number)):
            rows = _metrics(folder)
            avg = moving_average([r["reward"] for r in rows], window)
            if avg:
                ax.plot(
                    [r["step"] for r in rows][window - 1 :],
                    avg,
                    color=f"C{colour % 10}",
                    lw=1.2,
                    label=f"trial {t.number}" if i == 0 else None,
                )
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("step")
    ax.set_ylabel(f"reward, moving average (w={window})")
    ax.legend(fontsize=8, loc="lower right")
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.13, top=0.97)
    fig.savefig(path)
    plt.close(fig)
    return path


def search_report(
    spec_path: str | Path,
    storage_url: Optional[str] = None,
    out_root: str = defaults.SWEEPS,
    out: Optional[str | Path] = None,
) -> Path:
    """Write OUT/REPORT.md (default results/local/search-reports/<name>/) and its figures; its path."""
    spec, study = load_sweep_study(spec_path, storage_url)
    if spec.mode != "search":
        raise UserInputError(f"{spec.path}: a grid; allowed: a search spec (a grid's report is `grpo reproduce`)")
    folder = Path(out) if out is not None else Path(REPORTS) / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    cost = spent(study, spec, out_root)
    best = ranked(study, spec)
    front = pareto_front(study, spec)
    states = ", ".join(f"{n} {k.lower()}" for k, n in sorted(cost["states"].items()))
    objectives = ", ".join(f"{o} ({d})" for o, d in zip(spec.all_objectives, spec.all_directions))
    lines = [f"# Search: {spec.name}", ""]
    if spec.text.get("question"):
        lines += [f"**Question:** {spec.text['question']}", ""]
    pruner = spec.pruner.get("type", "none") if spec.pruner else "none"
    lines += [
        f"Spec `{spec.path}`: {spec.sampler} sampler, {spec.n_trials} trials, seeds {spec.seeds} inside each "
        f"trial (its value is their mean), objective(s) {objectives}, pruner {pruner}.",
        "",
        "## What the budget bought",
        "",
        f"Trials: {states or 'none yet'}. Runs trained: {cost['runs']} ({cost['steps']} optimizer steps, "
        f"{cost['train_time_s']:.1f} s of training, pruned and failed runs included).",
        "",
    ]
    lines += ["## Best trials", ""]
    if best:
        lines += best_table(best[:BEST], spec) + [""]
    else:
        lines += ["No trial is complete yet.", ""]
    if front:
        png = pareto_png(study, spec, front, folder / "pareto.png")
        lines += [
            "## Pareto front",
            "",
            f"The trials that no other complete trial beats on every objective ({len(front)} of {len(best)}):",
            "",
            *best_table(front, spec),
            "",
            f"![Pareto front]({png.name})",
            "",
        ]
    lines += [
        "## Parameter importance",
        "",
        "Each parameter's share of the variance of each objective over the complete trials (Optuna's "
        "fANOVA, seed 0); pruned and failed trials have no value and are left out.",
        "",
        importance_table(importance(study, spec), importance_spread(study, spec)),
        "",
    ]
    shown = front[:BEST] if front else best[:3]
    curves = curves_png(shown, spec, out_root, folder / "curves.png") if shown else None
    if curves is not None:
        lines += ["## Reward curves of the best trials", "", f"![reward curves]({curves.name})", ""]
    write_text_atomic(folder / "REPORT.md", "\n".join(lines))
    return folder / "REPORT.md"
