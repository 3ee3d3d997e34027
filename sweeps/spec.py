"""Sweep specs: a base config, grid axes, seeds, an optional search space, the objective, the
budget, and the question the sweep answers. Everything is validated (every grid point is built
into a GRPOConfig) before any store is touched."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, get_args

from grpo_core.config.schema import FIELD_NAMES, GRPOConfig, field_type
from grpo_core.config.loading import config_from_dict
from grpo_core.config.validation import SEED_RANGE, check_inputs, seed_in_range
from grpo_core.config.values import coerce_value, short_value
from grpo_core.util.errors import ConfigError, UserInputError
from grpo_core.record.run_metrics import CENSORED, censored_at
from grpo_core.util.yaml_files import read_yaml_mapping

from . import arms

# Objectives: summary metrics of a run, with their natural direction.
OBJECTIVES = {
    "steps_to_learn": "minimize",  # never-learned runs count as censored at max_steps
    "loss_departure_step": "minimize",  # never-departed runs count as censored at max_steps
    "final_reward": "maximize",
    "reward_auc": "maximize",
    "eval_accuracy_after": "maximize",
    "wall_time_s": "minimize",
}
QUICK_KEYS = ("max_steps", "seeds", "replication_seeds", "grid")  # a spec's `quick`: what --quick changes
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "successive_halving", "hyperband")  # Optuna's; on the runs' smoothed reward (sweeps/driving/search.py)
PRUNER_KEYS = ("type", "warmup_steps", "startup_trials")
TEXT_KEYS = ("question", "claim", "source", "hypothesis", "expected", "notes")
SPEC_KEYS = ("name", "base", "grid", "arms", "seeds", "replication_seeds", "search", "sampler", "n_trials", "objective", "direction",
             "pruner", "mlflow_experiment", "report", "quick", *TEXT_KEYS)
SEARCH_KEYS = ("low", "high", "log", "type", "choices")


@dataclass
class SweepSpec:
    name: str
    """Optuna study name, MLflow parent run name, and the default MLflow experiment."""
    base: dict
    """Config keys shared by every trial (partial; defaults fill the rest)."""
    grid: dict
    """Axis (config key, or `arm`) -> list of values; grids run every combination × every seed."""
    seeds: list
    """Seeds: a grid axis in grid mode; inside the objective (mean over seeds) in search mode."""
    replication_seeds: list = field(default_factory=list)
    """A second seed set, disjoint from `seeds` (grid mode): its runs are trained as the others; the
    report tests every comparison on each set and calls a claim supported or contradicted only when
    both agree (sweeps/deciding/verdicts.py)."""
    search: dict = field(default_factory=dict)
    """Config key -> {low, high, log, type: float|int} or {choices: [...]}; non-empty = search mode."""
    sampler: str = "tpe"
    """Search sampler: `tpe` (default) or `random`."""
    n_trials: Optional[int] = None
    """Search budget: total trials in the study (any state). Grid mode: the grid size."""
    objective: str = "steps_to_learn"
    """Summary metric to optimize."""
    direction: str = "minimize"
    """`minimize` or `maximize`; defaults to the objective's natural direction."""
    objectives: list = field(default_factory=list)
    """A search's objectives, when it has several (`objective: [steps_to_learn, final_reward]`): the
    first is `objective`; Optuna's multi-objective search keeps their Pareto front. Empty = one."""
    directions: list = field(default_factory=list)
    """The direction of each of `objectives`."""
    pruner: dict = field(default_factory=dict)
    """A search's pruner: {type: median | successive_halving | hyperband, warmup_steps, startup_trials}
    on each run's smoothed reward (sweeps/driving/search.py); empty = none. Never in a grid."""
    mlflow_experiment: str = ""
    """MLflow experiment; empty = the sweep name."""
    text: dict = field(default_factory=dict)
    """question / claim / source / hypothesis / expected / notes: what the sweep answers."""
    report: dict = field(default_factory=dict)
    """For `grpo reproduce`: figures and the statistical tests behind the verdict (report.py)."""
    quick: dict = field(default_factory=dict)
    """For `grpo reproduce --quick`: fewer `seeds` and `max_steps`."""
    path: str = ""
    arms: dict = field(default_factory=dict)
    """Arm name -> {config key: value}: the values of the grid axis `arm` (sweeps/arms.py); empty = none."""

    @property
    def all_objectives(self) -> list:
        return self.objectives or [self.objective]

    @property
    def all_directions(self) -> list:
        return self.directions or [self.direction]

    @property
    def mode(self) -> str:
        return "search" if self.search else "grid"

    @property
    def grid_seeds(self) -> list:
        """Every seed the grid runs: the discovery seeds, then the replication seeds."""
        return [*self.seeds, *self.replication_seeds]

    @property
    def experiment(self) -> str:
        return self.mlflow_experiment or self.name

    def grid_points(self) -> list[dict]:
        """Every combination of the grid axes with every seed, in a fixed order."""
        axes = list(self.grid) + ["seed"]
        values = [self.grid[a] for a in self.grid] + [self.grid_seeds]
        return [dict(zip(axes, combo)) for combo in itertools.product(*values)]

    def config_for(self, params: dict, **extra) -> GRPOConfig:
        return config_from_dict({**self.base, **arms.expand(self.arms, params), **extra},
                                source=f"{self.path} (sweep {self.name})")

    def point_of(self, config: dict) -> dict:
        """The grid point (axes and seed) a run's config records; an arm is told by its values (None
        where no arm's match). KeyError where the config lacks an axis or a key the arms set."""
        point = {axis: arms.arm_of(self.arms, config) if axis == arms.ARM else config[axis] for axis in self.grid}
        point["seed"] = config["seed"]
        return point

    def value_text(self, value: float, attrs: dict) -> str:
        """A trial's objective as printed: a censored one says so ("not learned (counted as 200)")."""
        if self.objective in CENSORED and self.objective in attrs and attrs[self.objective] is None:
            return f"{'not learned' if self.objective == 'steps_to_learn' else 'not reached'} (counted as {value:g})"
        return f"{value:g}"

    def censor(self, summary: dict, max_steps: int, objective: Optional[str] = None) -> float:
        """The run's value of `objective` (default the first): a censored metric counts as max_steps."""
        objective = objective or self.objective
        value = summary.get(objective)
        if value is None and objective in CENSORED:
            return censored_at(objective, summary, max_steps)
        if value is None:
            return math.nan
        return float(value)

    def check_quick(self) -> None:
        """A spec's `quick` section, whole, at every command that reads the spec (a typo or a value of
        the wrong shape surfaced only at `grpo reproduce --quick`, some as a traceback)."""
        quick = self.quick or {}
        unknown = sorted(set(quick) - set(QUICK_KEYS))
        if unknown:
            raise UserInputError(f"{self.path}: quick.{unknown[0]}: unknown key; allowed: {', '.join(QUICK_KEYS)}")
        steps = quick.get("max_steps", 1)
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise UserInputError(f"{self.path}: quick.max_steps: {short_value(steps)}; allowed: an integer ≥ 1")
        for key in ("seeds", "replication_seeds"):
            check_seeds(self.path, f"quick.{key}", quick.get(key, []))  # the rule of the spec's own seed lists
        grid = quick.get("grid", {})
        if not isinstance(grid, dict):
            raise UserInputError(f"{self.path}: quick.grid: {short_value(grid)}; allowed: a mapping of grid axes to "
                                 f"sub-lists of their values, e.g. {{{next(iter(self.grid), 'axis')}: [...]}}")
        for axis, values in grid.items():  # a part of the grid, never new values
            full = self.grid.get(axis)
            if full is None:
                raise UserInputError(f"{self.path}: quick.grid.{axis}: not a grid axis; allowed: {', '.join(self.grid)}")
            if not isinstance(values, list) or not values or any(v not in full for v in values):
                raise UserInputError(f"{self.path}: quick.grid.{axis}: {short_value(values)}; allowed: a non-empty "
                                     f"sub-list of grid.{axis} {full}")


def _err(path: str, key: str, message: str) -> UserInputError:
    return UserInputError(f"{path}: {key}: {message}")


def _grid_value(path: str, axis: str, value: Any, where: Optional[str] = None):
    """Coerce a grid value (or a search choice: `where` labels it) to the config field's type
    (PyYAML reads 1e-4 as a string)."""
    where = where or f"grid.{axis}"
    try:
        coerced = coerce_value(axis, value)
    except ConfigError as exc:
        raise _err(path, where, str(exc).split(": ", 1)[1]) from None
    # a list-valued key (reward_funcs) takes one string per grid value: Optuna needs scalars
    value = value if isinstance(coerced, list) and isinstance(value, str) else coerced
    if not (value is None or isinstance(value, (bool, int, float, str))):
        raise _err(path, where, f"values must be scalars, got {value!r}")
    return value


def _distinct(path: str, where: str, values: list) -> list:
    """Grid values and search choices alike: each value once."""
    if len(set(map(repr, values))) != len(values):
        raise _err(path, where, f"repeated value in {values}; allowed: each value once")
    return values


MAX_NAME = 100  # characters of a sweep name: a folder, an Optuna study and an MLflow experiment are named after it
MAX_GRID_POINTS = 10_000  # points × seeds of one grid: more is a search's job (each point is one training run)


def _search_entry(path: str, key: str, entry: Any) -> dict:
    where = f"search.{key}"
    if not isinstance(entry, dict) or not entry:
        raise _err(path, where, "expected {low, high[, log, type]} or {choices: [...]}")
    unknown = sorted(set(entry) - set(SEARCH_KEYS))
    if unknown:
        raise _err(path, where, f"unknown field {unknown[0]!r}; allowed: {', '.join(SEARCH_KEYS)}")
    if "choices" in entry:
        if set(entry) - {"choices"}:
            raise _err(path, where, f"choices and {', '.join(sorted(set(entry) - {'choices'}))} together; allowed: "
                                    f"either {{choices: [...]}} or a range {{low, high[, log, type]}}")
        choices = entry["choices"]
        if not isinstance(choices, list) or not choices:
            raise _err(path, where, "choices must be a non-empty list")
        return {"choices": _distinct(path, where, [_grid_value(path, key, c, where) for c in choices])}
    declared = field_type(key)
    declared = next((a for a in get_args(declared) if a is not type(None)), declared)  # Optional[float]: float
    if declared not in (int, float):  # a range is drawn from numbers: a string or a switch is chosen from a list
        raise _err(path, where, "a range for a key that is not a number; allowed: {choices: [...]} of its values")
    kind = entry.get("type", "int" if declared is int else "float")
    if kind not in ("float", "int"):
        raise _err(path, where, f"type {kind!r}; allowed: float, int")
    if declared is int and kind == "float":  # every trial would fail on its first non-integer value
        raise _err(path, where, "type float for an integer key; allowed: type int (or leave type out)")
    try:
        low, high = float(entry["low"]), float(entry["high"])
    except (KeyError, TypeError, ValueError):
        raise _err(path, where, "needs numeric low and high") from None
    log = entry.get("log", False)
    if not isinstance(log, bool):
        raise _err(path, where, f"log must be true or false, got {log!r}")
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high or (log and low <= 0):
        raise _err(path, where, f"needs finite low < high (and low > 0 with log), got low={low}, high={high}")
    if kind == "int":
        if math.ceil(low) >= math.floor(high):
            raise _err(path, where, f"an integer range needs two integers or more in [low, high], got low={low}, "
                                    f"high={high}")
        low, high = math.ceil(low), math.floor(high)
    return {"low": low, "high": high, "log": log, "type": kind}


def check_seeds(path: str, key: str, seeds) -> None:
    """A list of distinct integers in numpy's seed range (the config's rule for `seed`, named here by
    the spec's key)."""
    allowed = f"a list of distinct integers in {SEED_RANGE}"
    if not isinstance(seeds, list):
        raise _err(path, key, f"{short_value(seeds)}; allowed: {allowed}")
    for s in seeds:
        if not seed_in_range(s):
            raise _err(path, key, f"{short_value(s)} in {short_value(seeds)}; allowed: {allowed}")
    if len(set(seeds)) != len(seeds):
        raise _err(path, key, f"{short_value(seeds)} repeats a seed; allowed: {allowed}")


def load_spec(path: str | Path, check_points: bool = True) -> SweepSpec:
    """The spec, every grid point built into a config first (check_points=False: not, for
    rebuilding a report from committed run folders on a machine without the spec's model)."""
    path = str(path)
    data = read_yaml_mapping(path)
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise _err(path, unknown[0], f"unknown key; allowed: {', '.join(SPEC_KEYS)}")
    name = data["name"] if "name" in data else Path(path).stem  # `name: ""` is a bad name, not a missing one
    if not isinstance(name, str) or not name[:1].isalnum() or not all(c.isalnum() or c in "-_." for c in name) \
            or len(name) > MAX_NAME:
        raise _err(path, "name", f"{short_value(name)}; allowed: letters, digits, '-', '_' and '.', starting with a letter or "
                                 f"digit, at most {MAX_NAME} characters")

    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise _err(path, "base", "expected a mapping of config keys")
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise _err(path, "grid", "expected a mapping of axis -> list of values")
    has_arms = data.get("arms") is not None
    for axis, values in grid.items():
        if axis == "seed":
            raise _err(path, "grid.seed", "seeds go in `seeds`, not in the grid")
        if axis == arms.ARM and not has_arms:
            raise _err(path, "grid.arm", "names arms the spec does not define; allowed: with `arms` (sweeps/arms.py)")
        if axis not in FIELD_NAMES and axis != arms.ARM:
            raise _err(path, f"grid.{axis}", f"unknown axis; allowed: config keys ({', '.join(FIELD_NAMES)})")
        if not isinstance(values, list):
            raise _err(path, f"grid.{axis}", f"expected a list of values, got {short_value(values)}; "
                                             f"allowed: a non-empty list (one value: [{short_value(values)}])")
        if not values:
            raise _err(path, f"grid.{axis}", "empty grid axis; give a non-empty list of values")
    listed_arms = grid.get(arms.ARM)
    grid = {axis: _distinct(path, f"grid.{axis}", [_grid_value(path, axis, v) for v in values])
            for axis, values in grid.items() if axis != arms.ARM}

    seeds = data.get("seeds")
    if seeds is None or seeds == []:
        raise _err(path, "seeds", "empty or missing; give a non-empty list of integer seeds")
    check_seeds(path, "seeds", seeds)
    replication = data.get("replication_seeds") or []
    check_seeds(path, "replication_seeds", replication)
    if set(replication) & set(seeds):
        raise _err(path, "replication_seeds", f"{sorted(set(replication) & set(seeds))} also in seeds; allowed: "
                                              f"seeds disjoint from `seeds` (an independent replication)")

    search_raw = data.get("search") or {}
    if not isinstance(search_raw, dict):
        raise _err(path, "search", "expected a mapping of config key -> range or choices")
    for key in search_raw:
        if key not in FIELD_NAMES or key == "seed":
            raise _err(path, f"search.{key}", "unknown or unsearchable key; allowed: config keys except seed")
    search = {k: _search_entry(path, k, v) for k, v in search_raw.items()}
    for where, keys in (("grid", grid), ("search", search)):
        if "cpu_math" in keys:  # set before torch loads, once for the sweep's whole process tree
            raise _err(path, f"{where}.cpu_math", "cannot vary within a sweep; allowed: in base only (one mode "
                                                  "per sweep: its workers share the process's CPU math)")
    overlap = sorted((set(grid) | set(search)) & set(base))
    if overlap:
        raise _err(path, overlap[0], "is both in base and in grid/search; keep it in one place")
    named_arms = {}
    if has_arms:  # the axis `arm` first: a run is named and grouped by its arm before the other axes
        named_arms = arms.parse_arms(path, data["arms"], set(base) | set(grid) | set(search),
                                     lambda key, value, where: _grid_value(path, key, value, where))
        grid = {arms.ARM: _distinct(path, "grid.arm", arms.arm_axis(path, named_arms, listed_arms)), **grid}
    if not grid and not search:
        raise _err(path, "grid", "empty grid and no search space; give at least one axis or a search space")

    points = math.prod(len(v) for v in grid.values()) * (len(seeds) + len(replication))
    if points > MAX_GRID_POINTS:
        raise _err(path, "grid", f"{points:,} runs (points × seeds); allowed: at most {MAX_GRID_POINTS:,} (a larger "
                                 f"space is a search's: `search` with n_trials)")
    objectives, directions = _objectives(path, data, bool(search))
    objective, direction = objectives[0], directions[0]
    pruner = _pruner(path, data.get("pruner"), bool(search), len(objectives))
    sampler = data.get("sampler", "tpe")
    if not isinstance(sampler, str) or sampler not in SAMPLERS:
        raise _err(path, "sampler", f"unknown sampler {sampler!r}; allowed: {', '.join(SAMPLERS)}")
    if "sampler" in data and not search:
        raise _err(path, "sampler", "only for a search; a grid runs every point once (remove `sampler`)")
    n_trials = data.get("n_trials")
    if search:
        if not isinstance(n_trials, int) or isinstance(n_trials, bool) or n_trials < 1:
            raise _err(path, "n_trials", f"a search needs a budget: an integer ≥ 1, got {n_trials!r}")
        if replication:
            raise _err(path, "replication_seeds", "only for a grid; a search keeps its seeds inside the objective")
        runs = n_trials * len(seeds) * math.prod(len(v) for v in grid.values())
        if runs > MAX_GRID_POINTS:
            raise _err(path, "n_trials", f"{n_trials:,} trials × {runs // n_trials:,} run(s) each = {runs:,} runs; allowed: at "
                                         f"most {MAX_GRID_POINTS:,} runs per sweep")
    elif n_trials is not None:
        raise _err(path, "n_trials", "only for a search; a grid runs each of its points once")
    experiment = data.get("mlflow_experiment", "") or ""
    if not isinstance(experiment, str):
        raise _err(path, "mlflow_experiment", f"expected a name (a string), got {experiment!r}")
    text = {k: str(data[k]) for k in TEXT_KEYS if k in data}
    for key in ("report", "quick"):
        if not isinstance(data.get(key) or {}, dict):
            raise _err(path, key, "expected a mapping")
    spec = SweepSpec(name=name, base=base, grid=grid, seeds=seeds, replication_seeds=replication, search=search, sampler=sampler,
                     n_trials=n_trials, objective=objective, direction=direction,
                     objectives=objectives if len(objectives) > 1 else [],
                     directions=directions if len(objectives) > 1 else [], pruner=pruner,
                     mlflow_experiment=str(experiment), text=text, report=data.get("report") or {},
                     quick=data.get("quick") or {}, path=path, arms=named_arms)
    if check_points:
        _check_every_point(spec)
    return spec


def _objectives(path: str, data: dict, search: bool) -> tuple[list, list]:
    """`objective` (a name, or a search's list of names) and `direction` (one per objective; each
    defaults to its objective's natural direction)."""
    raw = data.get("objective", "steps_to_learn")
    names = raw if isinstance(raw, list) else [raw]
    allowed = ", ".join(OBJECTIVES)
    if not names or any(not isinstance(n, str) or n not in OBJECTIVES for n in names):
        raise _err(path, "objective", f"unknown objective {raw!r}; allowed: one of {allowed}, or a search's list of them")
    if len(set(names)) != len(names):
        raise _err(path, "objective", f"{raw!r} names one twice; allowed: distinct objectives")
    if isinstance(raw, list) and not search:
        raise _err(path, "objective", f"{raw!r}: a list of objectives is a search's (`search` with n_trials); "
                                      "allowed in a grid: one name")
    raw_dir = data.get("direction", [OBJECTIVES[n] for n in names] if isinstance(raw, list) else OBJECTIVES[names[0]])
    directions = raw_dir if isinstance(raw_dir, list) else [raw_dir]
    if isinstance(raw_dir, list) != isinstance(raw, list) or len(directions) != len(names) or any(d not in ("minimize", "maximize") for d in directions):
        raise _err(path, "direction", f"{raw_dir!r}; allowed: minimize or maximize, one per objective")
    return names, directions


def _pruner(path: str, raw, search: bool, objectives: int) -> dict:
    """`pruner: median` or `pruner: {type: hyperband, warmup_steps: 20, startup_trials: 4}`."""
    if raw is None or raw == "none":
        return {}
    entry = {"type": raw} if isinstance(raw, str) else raw
    if not isinstance(entry, dict) or entry.get("type") not in PRUNERS:
        raise _err(path, "pruner", f"{raw!r}; allowed: none, {', '.join(PRUNERS)}, or a mapping with `type`")
    if unknown := sorted(set(entry) - set(PRUNER_KEYS)):
        raise _err(path, f"pruner.{unknown[0]}", f"unknown key; allowed: {', '.join(PRUNER_KEYS)}")
    if not search:
        raise _err(path, "pruner", "only for a search; a grid's paired verdicts need every run to finish")
    if objectives > 1:
        raise _err(path, "pruner", "only with one objective (Optuna prunes single-objective studies)")
    out = {"type": entry["type"], "warmup_steps": entry.get("warmup_steps", 0), "startup_trials": entry.get("startup_trials", 4)}
    for key in ("warmup_steps", "startup_trials"):
        if not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 0:
            raise _err(path, f"pruner.{key}", f"got {out[key]!r}; allowed: an integer ≥ 0")
    return out


def _check_every_point(spec: SweepSpec) -> None:
    """Build the config of every grid point (search: its bounds) so bad values fail now, and
    check what needs reading (datasets, reward modules, checkpoints) once per distinct input."""
    configs = [spec.config_for({})]  # base alone
    if spec.mode == "grid":
        configs += [spec.config_for(point) for point in spec.grid_points()]
    else:
        for point in ({**g, "seed": s} for g in (dict(zip(spec.grid, c)) for c in itertools.product(*spec.grid.values()))
                      for s in spec.seeds):
            for key, entry in spec.search.items():
                for value in entry.get("choices") or (entry["low"], entry["high"]):
                    configs.append(spec.config_for({**point, key: value}))
    checked = set()
    for cfg in configs:
        # a checkpoint is compared with the whole config, so each point with one is checked
        key = (cfg.dataset, cfg.prompt_column, cfg.answer_column, tuple(cfg.reward_funcs),
               cfg.model, cfg.task, cfg.tiny_pretrain_steps, cfg.cache_dir,
               repr(cfg) if cfg.resume_from_checkpoint else None)
        if key not in checked:
            checked.add(key)
            check_inputs(cfg)


# ---- grid points ------------------------------------------------------------------------------
def grid_space(spec: SweepSpec) -> dict:
    return {**spec.grid, "seed": spec.grid_seeds}


def grid_point_of(spec: SweepSpec, trial) -> Optional[dict]:
    """The grid point a trial runs: its params, which claim_trial suggests before it lets go of
    the claim lock; None for a trial that never got them, or not yet (an enqueued trial gets
    them when a worker asks for it)."""
    if set(trial.params) == set(grid_space(spec)):
        return dict(trial.params)
    return None


def point_key(point: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in point.items()))


# keys that do not change what a run is: where it was logged, where caches live, its threads
# (num_threads changes the last bits of the float math, not the experiment: the report lists it),
# how often it wrote checkpoints and which one it went on from (a resumed run's metrics are an
# uninterrupted one's: sweeps/driving/resume.py)
IGNORED = ("mlflow_tracking_uri", "mlflow_experiment", "run_name", "cache_dir", "num_threads", "save_steps",
           "resume_from_checkpoint")


def config_difference(spec: SweepSpec, point: dict, config: dict,
                      absent_ok: bool = False) -> Optional[tuple[str, Any, Any]]:
    """The first key (key, the folder's value, the spec's) where a folder's config is not the
    spec's for the point, or None. A key the folder's config lacks (the run predates it) matches its
    default: a new key's default is what runs did before it existed (absent_ok: it is not compared)."""
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(GRPOConfig)}
    for key, want in spec.config_for(point).to_dict().items():
        if absent_ok and key not in config:
            continue
        have = config[key] if key in config else defaults[key]
        if key not in IGNORED and have != want:
            return key, have, want
    return None
