"""Resuming a grid sweep from its run folders: a finished run folder is a finished grid point.

The Optuna study (journal or database) says which trials ran; the run folders say it too, and
they are what is committed (results/real/cpu/runs/) and copied between machines. When a sweep
starts with a study that does not know a finished folder (a fresh clone, a new journal, another
machine's folders copied here), the folder's point becomes a COMPLETE trial of the study, marked
`adopted`, so the sweep trains only the points that have no finished folder.

A folder is adopted only when it is exactly the run this sweep would train at that point: its
summary says `finished`, and its config.yaml equals the spec's config for the point in every key
but the ones that say where the run was logged or how many threads computed it (sweeps/spec.py: IGNORED). A
folder made from another spec, an older base or a killed run is left where it is and its point is
trained again beside it (the report keeps one run per point, the later one)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import yaml

from grpo_core.util.errors import UserInputError
from grpo_core.run import read_metrics

from ..spec import SweepSpec, config_difference, grid_point_of, grid_space, point_key


def finished_run(folder: Path) -> Optional[tuple[dict, dict]]:
    """(summary, config) of a finished, undamaged run folder; None for one unfinished, damaged (a
    file missing or unreadable, metrics.jsonl cut short of summary's steps_completed) or not a run."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
        config = yaml.safe_load((folder / "config.yaml").read_text())
        steps = len(read_metrics(folder / "metrics.jsonl"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if (
        not isinstance(summary, dict)
        or summary.get("status") != "finished"
        or not isinstance(config, dict)
        or steps != summary.get("steps_completed")
    ):
        return None
    return summary, config


def _key_of(spec: SweepSpec, config: dict) -> Optional[tuple]:
    """The point_key of the grid point a folder's config records, or None where it records none of
    this sweep's (an axis it lacks, a value of the wrong kind)."""
    try:
        return point_key(spec.point_of(config))
    except (KeyError, ValueError, TypeError):
        return None


def finished_folders(out_root: Path, spec: SweepSpec) -> dict[tuple, tuple[Path, dict, dict]]:
    """Per grid point (point_key), the finished folder under out_root/spec.name that matches the
    spec's config for that point, with its summary and config: the last in name order where
    several do."""
    wanted = {point_key(p): p for p in spec.grid_points()}
    found: dict[tuple, tuple[Path, dict, dict]] = {}
    folder_root = Path(out_root) / spec.name
    if not folder_root.is_dir():
        return found
    for folder in sorted(p for p in folder_root.iterdir() if p.is_dir()):
        if (read := finished_run(folder)) is None:
            continue
        summary, config = read
        key = _key_of(spec, config)
        if key not in wanted or not _same_run(spec, wanted[key], config):
            continue
        found[key] = (folder, summary, config)
    return found


SHARED_PREFIX = "trial-shared-"  # a run folder copied from another spec's sweep (share_sibling_runs)
_LEFT_BEHIND = (".grpo-run.lock", ".grpo-reserve")  # a run's own bookkeeping, not part of the run


def share_sibling_runs(out_root, spec: SweepSpec) -> list[str]:
    """Copy into this sweep's folder every finished run of a sibling sweep under the same out_root
    (another spec's folder) that is exactly the run this sweep would train at one of its points
    without a finished folder: the same config in every key but IGNORED, the same seed. Claims that
    share an arm (the control of one is the treatment or control of another) then train it once.
    The copy is named trial-shared-<sibling>-<its folder> (a copy of a copy keeps its name, which
    names the sweep that trained it), so each spec's folder stays complete on its own (committed,
    reported, adopted as usual). Returns the copies' names."""
    import shutil

    out_root = Path(out_root)
    if spec.mode != "grid" or not out_root.is_dir():
        return []
    missing = {point_key(p): p for p in spec.grid_points()}
    for key in finished_folders(out_root, spec):
        missing.pop(key, None)
    copied = []
    # originals before copies (a sibling's own trial-shared-* folders): a run is taken from the sweep
    # that trained it wherever that sweep still holds it, and a copy of a copy keeps the copy's name,
    # which already names the sweep that trained it
    candidates = sorted(
        ((folder.name.startswith(SHARED_PREFIX), sibling.name, folder.name), folder)
        for sibling in out_root.iterdir()
        if sibling.is_dir() and sibling.name != spec.name
        for folder in sibling.iterdir()
        if folder.is_dir()
    )
    for (is_copy, sibling, _), folder in candidates:
        if not missing:
            break
        read = finished_run(folder)
        if read is None:
            continue
        config = read[1]
        key = _key_of(spec, config)
        if key not in missing:
            continue
        try:
            same = _same_run(spec, missing[key], config)
        except (UserInputError, ValueError, TypeError):  # a config this spec cannot even build: not its run
            continue
        if not same:
            continue
        name = (
            folder.name
            if is_copy and not (out_root / spec.name / folder.name).exists()
            else f"{SHARED_PREFIX}{sibling}-{folder.name}"
        )
        shutil.copytree(folder, out_root / spec.name / name, ignore=shutil.ignore_patterns(*_LEFT_BEHIND))
        copied.append(name)
        del missing[key]
    return copied


def _same_run(spec: SweepSpec, point: dict, config: dict) -> bool:
    return config_difference(spec, point, config) is None


def adopt_run_folders(study, spec: SweepSpec, out_root) -> int:
    """Add a COMPLETE trial for each finished folder whose point has no COMPLETE trial yet;
    returns how many were added. Grid sweeps only (a search's trials are not points of a grid)."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    if spec.mode != "grid":
        return 0
    done = {
        point_key(p)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if (p := grid_point_of(spec, t)) is not None
    }
    distributions = {name: CategoricalDistribution(values) for name, values in grid_space(spec).items()}
    added = 0
    for key, (folder, summary, config) in finished_folders(Path(out_root), spec).items():
        if key in done:
            continue
        point = spec.point_of(config)
        value = spec.censor(summary, config["max_steps"])
        if math.isnan(value):
            continue
        attrs = {
            k: summary[k]
            for k in ("steps_to_learn", "learned", "loss_departure_step", "final_reward", "baseline_reward")
            if k in summary
        }
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=value,
                params=point,
                distributions=distributions,
                user_attrs={**attrs, "run_dir": str(folder), "adopted": True},
            )
        )
        added += 1
    return added


def has_adopted(trials) -> bool:
    return any(t.user_attrs.get("adopted") for t in trials)


def free_folder(root: Path, number: int, invocation: str) -> Path:
    """`trial-<number>`, or, where an adopted folder already has that name, `trial-<number>-<invocation>`."""
    out = root / f"trial-{number:04d}"
    return out if not out.exists() else root / f"trial-{number:04d}-{invocation}"
