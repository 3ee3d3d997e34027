"""What the report reads: the finished run folders of a claim's sweep (collect_runs), each checked
against its spec's config at its point and read into a Run, the plain data the verdicts
(sweeps/deciding/) decide on; every folder left out is named with why. The spec's `report` section,
which says what is tested, is sweeps/report_spec.py. Needs neither Optuna nor MLflow."""

from __future__ import annotations

import json
import math
from typing import Optional
from pathlib import Path

import yaml

from grpo_core.util.errors import UserInputError, short_value
from grpo_core.util.files import read_metrics

from ..deciding.baselines import REGISTER, read_register, with_setup_baselines
from ..deciding.runs import Run, _label
from ..report_spec import SUMMARY_METRICS
from ..spec import IGNORED, SweepSpec, config_difference, point_key


def _summary_fault(summary: dict) -> Optional[str]:
    """What makes a finished run's summary.json unusable for a report: a value a test reads that is
    not a number (or null), or a step count that is not an integer."""
    steps = summary.get("steps_completed")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)):
        return f"steps_completed is {short_value(steps)}, not an integer"
    for key in SUMMARY_METRICS:
        value = summary.get(key)
        if value is not None and not isinstance(value, (int, float)):
            return f"{key} is {short_value(value)}, not a number"
    return None


RECOMPUTED = ("steps_to_learn", "learned", "loss_departure_step", "final_reward", "reward_auc")


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def data_fault(summary: dict, metrics: list[dict], config: dict) -> Optional[str]:
    """Where a finished run's summary.json says what its metrics.jsonl does not: what a verdict
    reads (steps_to_learn, learned, loss_departure_step, final_reward, reward_auc, and the
    completions counted to learn) recomputed from the per-step rewards and losses by the current
    code, with the run's own config (window, δ, ε) and its recorded baseline; and values the run's
    spec makes impossible (no steps, more or fewer steps than max_steps). The usual cause is not tampering
    but a summary written by code whose definitions have changed since."""
    from grpo_core.config.schema import GRPOConfig
    from grpo_core.record.run_metrics import completion_counts, summarize

    if not metrics:
        return "metrics.jsonl has no steps"
    max_steps = config.get("max_steps", GRPOConfig.max_steps)
    if isinstance(max_steps, int) and len(metrics) > max_steps:
        return f"{len(metrics)} steps in a run of max_steps {max_steps}"
    if isinstance(max_steps, int) and len(metrics) < max_steps:  # no run ends early as finished: a killed one cut
        return f"finished after {len(metrics)} of its max_steps {max_steps} steps"
    try:
        rewards = [float(row["reward"]) for row in metrics]
        losses = [float(row["loss"]) for row in metrics]
        recomputed = summarize(
            rewards,
            losses,
            float(summary["baseline_reward"]),
            int(config.get("stl_window", GRPOConfig.stl_window)),
            float(config.get("stl_delta", GRPOConfig.stl_delta)),
            float(config.get("loss_departure_eps", GRPOConfig.loss_departure_eps)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        return f"metrics.jsonl or summary.json lacks what the verdicts recompute ({_why(exc)})"
    if "completions_to_learn" in summary and all("completions/generated" in row for row in metrics):
        recomputed.update(
            completion_counts([row["completions/generated"] for row in metrics], recomputed["steps_to_learn"])
        )
    for key in (*RECOMPUTED, "completions_to_learn", "completions_generated"):
        if key in recomputed and key in summary and not _same(summary[key], recomputed[key]):
            return (
                f"summary.json's {key} {short_value(summary[key])} is not what its metrics.jsonl gives "
                f"({short_value(recomputed[key])})"
            )
    return None


def collect_runs(runs_root: Path, spec: SweepSpec, setup_baselines: bool = True) -> tuple[list[Run], list[str]]:
    """Finished runs of a sweep, and the trial folders left out, each named with why: not finished
    (killed, failed, still running), damaged (a file missing, cut or unreadable), not this spec's
    (a point outside its grid, or a config that differs from its base), or a second finished run
    of one point (the later folder is kept, as a resumed sweep does). `setup_baselines`: each run
    measured against its set-up's baseline where the testbed's register (`baselines.json` beside
    `runs_root`) has one (sweeps/deciding/baselines.py), not the one its own machine measured."""
    from grpo_core.config.values import coerce_value

    wanted = {point_key(p) for p in spec.grid_points()}
    try:
        declared = {k: coerce_value(k, v) for k, v in spec.base.items() if k not in IGNORED}
    except ValueError:  # a ConfigError is one: a base not loaded through load_spec's checks
        declared = dict(spec.base)

    def difference(point: dict, config: dict) -> Optional[tuple]:
        """Where the folder's config is not the spec's at its point: the spec's own base keys, then
        every other key the folder records, as `grpo sweep` compares folders it adopts (skipped where
        the point's config cannot be built here: a model or data file this machine does not have,
        for a report rebuilt from committed run folders)."""
        key = next((k for k, v in declared.items() if config.get(k) != v), None)
        if key is not None:
            return key, config.get(key), declared[key]
        try:
            return config_difference(spec, point, config, absent_ok=True)
        except UserInputError:
            return None

    runs, left_out = [], []
    for folder in sorted((runs_root / spec.name).glob("trial-*")):
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except FileNotFoundError:
            left_out.append(f"{folder.name} (not finished: no summary.json)")
            continue
        except (OSError, ValueError) as exc:
            left_out.append(f"{folder.name} (damaged: summary.json {_why(exc)})")
            continue
        if not isinstance(summary, dict):
            left_out.append(f"{folder.name} (damaged: summary.json not a mapping)")
            continue
        if summary.get("status") != "finished":
            left_out.append(f"{folder.name} ({summary.get('status') or 'not finished'})")
            continue
        if fault := _summary_fault(summary):
            left_out.append(f"{folder.name} (damaged: summary.json {fault})")
            continue
        try:
            config = yaml.safe_load((folder / "config.yaml").read_text())
            point = spec.point_of(config)
        except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError) as exc:
            left_out.append(f"{folder.name} (damaged: config.yaml {_why(exc)})")
            continue
        try:
            metrics = read_metrics(folder / "metrics.jsonl")
        except (OSError, ValueError) as exc:
            left_out.append(f"{folder.name} (damaged: metrics.jsonl {_why(exc)})")
            continue
        if len(metrics) != summary.get("steps_completed", len(metrics)):
            left_out.append(
                f"{folder.name} (damaged: metrics.jsonl has {len(metrics)} step(s), summary.json's "
                f"steps_completed {summary.get('steps_completed')})"
            )
            continue
        if (fault := data_fault(summary, metrics, config)) is not None:
            left_out.append(f"{folder.name} (its data disagree: {fault})")
            continue
        if point_key(point) not in wanted:
            left_out.append(f"{folder.name} (not a point of this spec's grid: {_label(point.items())})")
            continue
        if (differ := difference(point, config)) is not None:
            key, have, want = differ
            left_out.append(
                f"{folder.name} (another config: {key} {short_value(have)}, the spec's {short_value(want)})"
            )
            continue
        runs.append(Run(point, config, summary, metrics, folder))
    # a grid point can have a failed trial and, after a rerun, a finished one (left out above as not
    # finished); two finished folders of one point: the later is kept, the earlier named
    unique: dict[tuple, Run] = {}
    for r in runs:
        key = point_key(r.point)
        if key in unique:
            left_out.append(f"{unique[key].folder.name} (a second finished run of its point: {r.folder.name} is used)")
        unique[key] = r
    kept = list(unique.values())
    if setup_baselines:
        kept = with_setup_baselines(kept, read_register(Path(runs_root).parent / REGISTER))
    return kept, left_out


def _why(exc: BaseException) -> str:
    """A damaged file's fault in a few words."""
    if isinstance(exc, FileNotFoundError):
        return "missing"
    if isinstance(exc, (json.JSONDecodeError, yaml.YAMLError)):
        return "cut or not valid"
    if isinstance(exc, (KeyError, TypeError)):
        return f"lacks {exc.args[0]!r}" if isinstance(exc, KeyError) else "not a mapping"
    return f"unreadable ({type(exc).__name__})"
