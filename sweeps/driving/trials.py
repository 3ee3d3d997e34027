"""What a sweep's study holds, read only: `grpo trials` (the trials table, and with --importance
each parameter's importance) and grpo_lab.trials."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

from grpo_core.util import defaults
from grpo_core.util.errors import UserInputError

from .search import make_sampler
from ..spec import SweepSpec, grid_point_of, grid_space, load_spec
from .storage import check_storage, describe_storage, open_storage


def trials_table(study, spec: SweepSpec) -> str:
    """One line per trial: number, state, params, the value of each objective (or why it has none)."""
    names = list(grid_space(spec)) if spec.mode == "grid" else list(spec.grid) + list(spec.search)
    objectives = spec.all_objectives
    header = ["trial", "state", *names, *objectives]
    rows = [header]
    for t in study.get_trials(deepcopy=False):
        point = grid_point_of(spec, t) if spec.mode == "grid" else dict(t.params)
        point = point or {}
        if t.values is None or t.state.name != "COMPLETE":  # (a pruned trial's is its last intermediate value)
            values = [""] * len(objectives)
        elif len(objectives) == 1:
            values = [spec.value_text(t.values[0], t.user_attrs)]
        else:
            values = [f"{v:g}" for v in t.values]
        if t.state.name in ("FAIL", "PRUNED") and t.user_attrs.get("error"):
            values[0] = ("error: " if t.state.name == "FAIL" else "") + str(t.user_attrs["error"])[:60]
        rows.append([str(t.number), t.state.name, *[str(point.get(n, "")) for n in names], *values])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def load_sweep_study(spec_path: str | Path, storage_url: Optional[str] = None):
    """A sweep's spec and its study, read only: `grpo trials` and grpo_lab.trials. A store that is
    missing, is not one, or holds no such sweep is a one-line UserInputError; nothing is created."""
    import optuna

    spec = load_spec(spec_path)
    if storage_url is None and not Path(defaults.JOURNAL).exists():
        raise UserInputError(f"{spec.path}: no sweep has run on this machine yet ({defaults.JOURNAL} is missing)")
    check_storage(storage_url, must_exist=True)  # a read-only command creates no database
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=spec.name, storage=open_storage(storage_url), sampler=make_sampler(spec))
    except KeyError:
        raise UserInputError(
            f"{spec.path}: no sweep named {spec.name!r} in {describe_storage(storage_url)} "
            f"yet; run `grpo sweep {spec.path}` first"
        ) from None
    return spec, study


def list_trials(spec_path: str, storage_url: Optional[str] = None, evaluator: Optional[str] = None) -> int:
    """`grpo trials`: the table; with `evaluator` (fanova, ped-anova) each parameter's importance."""
    spec, study = load_sweep_study(spec_path, storage_url)
    print(trials_table(study, spec))
    if evaluator is not None:
        print(f"\nparameter importance ({evaluator}, complete trials only):")
        print(importance_table(importance(study, spec, evaluator)))
    return 0


EVALUATORS = ("fanova", "ped-anova")


def importance(study, spec: SweepSpec, evaluator: str = "fanova") -> dict[str, dict[str, float]]:
    """Each searched parameter's importance for each objective, from the complete trials (pruned and
    failed ones have no value): Optuna's fANOVA (a random forest, seed 0: the same numbers on every
    rerun) or PED-ANOVA. {objective: {param: share}}, shares summing to 1, most important first;
    {} while fewer than two complete trials differ in some parameter."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances

    if evaluator not in EVALUATORS:
        raise UserInputError(f"importance evaluator {evaluator!r}; allowed: {', '.join(EVALUATORS)}")
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    varied = [
        name
        for name in {n for t in complete for n in t.params}
        if len({repr(t.params.get(name)) for t in complete}) > 1
    ]
    if len(complete) < 2 or not varied:
        return {}
    out: dict = {}
    for i, name in enumerate(spec.all_objectives):
        if len({t.values[i] for t in complete}) < 2:  # every trial scored alike: nothing to apportion
            out[name] = {}
            continue
        ranked = FanovaImportanceEvaluator(seed=0) if evaluator == "fanova" else PedAnovaImportanceEvaluator()
        target = (lambda t, i=i: t.values[i]) if len(spec.all_objectives) > 1 else None
        out[name] = dict(get_param_importances(study, evaluator=ranked, params=sorted(varied), target=target))
    return out


IMPORTANCE_DRAWS = 20  # bootstrap resamples of the complete trials behind an importance's spread
RANK_HOLDS = 0.8  # a ranking is shown only where it holds in this share of the resamples


def importance_spread(study, spec: SweepSpec, draws: int = IMPORTANCE_DRAWS) -> dict:
    """What an importance rests on: the complete trials it is computed from (and the pruned and
    failed ones it cannot see), each share's 5-95% range over `draws` bootstrap resamples of the
    complete trials (fANOVA with the resample's index as seed), and for each objective whether the
    ranking (the most important parameter first) holds in at least RANK_HOLDS of them. A ranking
    from a handful of trials, one of which decides whether a run learns at all, does not."""
    import numpy as np
    import optuna
    from optuna.trial import TrialState

    counts = {
        s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,)))
        for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    }
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    out = {"counts": counts, "ranges": {}, "holds": {}}
    base = importance(study, spec)
    if not base:
        return out
    rng = np.random.default_rng(0)
    samples: dict = {o: {p: [] for p in shares} for o, shares in base.items()}
    same_top: dict = {o: 0 for o in base}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per resampled study
    try:
        _resample(study, spec, complete, draws, rng, base, samples, same_top)
    finally:
        optuna.logging.set_verbosity(verbosity)
    for o, by_param in samples.items():
        out["ranges"][o] = {
            p: (float(np.quantile(v, 0.05)), float(np.quantile(v, 0.95))) if v else (np.nan, np.nan)
            for p, v in by_param.items()
        }
        out["holds"][o] = same_top[o] / draws
    return out


def _resample(
    study, spec: SweepSpec, complete: list, draws: int, rng, base: dict, samples: dict, same_top: dict
) -> None:
    """importance_spread's resamples: each a study of the complete trials drawn with replacement."""
    import optuna

    for _ in range(draws):
        resampled = optuna.create_study(directions=study.directions)
        resampled.add_trials([complete[i] for i in rng.integers(0, len(complete), len(complete))])
        try:
            shares = importance(resampled, spec)
        except Exception:  # a resample Optuna's evaluator cannot read (e.g. one distinct point): no vote
            continue
        for o, by_param in base.items():
            got = shares.get(o) or {}
            for p in by_param:
                samples[o][p].append(got.get(p, 0.0))
            if got and by_param and next(iter(got)) == next(iter(by_param)):
                same_top[o] += 1


def ranking_text(shares: dict[str, float], ranges: dict, holds: float) -> str:
    """Whether an objective's ranking stands: its first parameter ranks first in at least RANK_HOLDS
    of the resamples and its 5% bound lies above the second one's 95% bound; else it is withheld."""
    names = list(shares)
    top = names[0]
    overlap = len(names) > 1 and ranges.get(top, (0, 0))[0] <= ranges.get(names[1], (0, 0))[1]
    if holds >= RANK_HOLDS and not overlap:
        return f"{top} ranks first in {holds:.0%} of the resamples, its range above the others': the ranking holds."
    why = (
        f"{top} ranks first in only {holds:.0%} of the resamples (below {RANK_HOLDS:.0%})"
        if holds < RANK_HOLDS
        else f"the ranges of {top} and {names[1]} overlap"
    )
    return f"ranking withheld: {why}, so these trials cannot say which parameter matters more."


def importance_table(shares: dict[str, dict[str, float]], spread: Optional[dict] = None) -> str:
    """Markdown: a row per parameter, a column per objective."""
    if not shares:
        return "(no importance yet: it needs two complete trials that differ in a parameter)"
    objectives = list(shares)
    params = list(dict.fromkeys(p for o in objectives for p in shares[o]))
    ranges = (spread or {}).get("ranges", {})

    def cell(o: str, p: str) -> str:
        if not shares[o]:
            return "–"
        low, high = ranges.get(o, {}).get(p, (None, None))
        return f"{shares[o][p]:.3f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None else "")

    lines = ["| parameter | " + " | ".join(objectives) + " |", "|---|" + "---|" * len(objectives)]
    lines += [f"| {p} | " + " | ".join(cell(o, p) for o in objectives) + " |" for p in params]
    if spread:
        c = spread["counts"]
        lines += [
            "",
            f"Rests on {c['complete']} complete trial(s) ({c['pruned']} pruned and {c['fail']} failed ones "
            f"have no value); in brackets each share's 5-95% range over {IMPORTANCE_DRAWS} resamples of the "
            f"complete trials.",
        ]
        for o, holds in spread["holds"].items():
            if not shares.get(o):
                continue
            lines.append(f"{o}: {ranking_text(shares[o], ranges.get(o, {}), holds)}")
    same = [o for o in objectives if not shares[o]]
    if same:
        lines += ["", f"– : every complete trial has the same {', '.join(same)}: no parameter explains any of it."]
    return "\n".join(lines)


def log_importance(study, spec: SweepSpec, client, parent_run_id: str) -> None:
    """The importance as metrics of the sweep's MLflow parent run (importance.<objective>.<param>);
    nothing while it cannot be computed."""
    try:
        shares = importance(study, spec)
    except Exception as exc:  # a study Optuna's evaluator cannot read: the sweep's own result stands
        print(f"grpo sweep: parameter importance not computed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric(f"importance.{o}.{p}", v, now, 0) for o, by_param in shares.items() for p, v in by_param.items()]
    if metrics:
        client.log_batch(parent_run_id, metrics=metrics)
