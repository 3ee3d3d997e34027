"""`grpo sweep SPEC --until-decided`: train a claim look by look until its paired tests are decided
or its budget is spent.

The spec declares its sequential design with its seed streams (`report.sequential: {looks, spending,
alpha, streams}`, sweeps/report_spec.py): at a look of n pairs each seed set's first n seeds of its
stream are trained (the run folders decide what is done, so a look already trained costs nothing and
a killed invocation goes on from them), then every paired test is read under the design on each seed
set (sweeps/deciding/sequential.py). While one of them is open on one set, the next look trains, on
that set alone and only the values of the compared axis (arms, or a grid key's values) its open tests
compare: a test decided on a set trains no more runs there, and an arm only decided tests compare is
left out. Once no test is open, nothing more trains. Each look's sweep has an Optuna journal of its
own (its spec has other seeds than the last look's), in results/local/journals/.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

from sweeps.spec import SweepSpec

from grpo_core.util import defaults
from grpo_core.util.errors import UserInputError
from grpo_core.util.yaml_files import dump_yaml, read_yaml_mapping

from ..deciding.replication import STEP_METRICS, replicated_verdicts
from ..deciding.sequential import DECIDED, reading_text, set_readings
from ..driving.driver import run_sweep
from ..driving.storage import journal_url
from ..report_spec import compared_metric, margin_of, report_tests, validate_report
from ..spec import load_spec
from .report_inputs import collect_runs


def _look_spec(path: Path, streams: dict, pairs: int, folder: Path) -> Path:
    """The spec with each seed set's first `pairs` seeds of its stream; its name unchanged, so its
    runs share the sweep's folder. The report reads the look from it."""
    data = read_yaml_mapping(path)
    for key, stream in streams.items():
        data[key] = list(stream[:pairs])
    data.setdefault("name", path.stem)
    out = folder / path.name
    out.write_text(dump_yaml(data))
    return out


def _training_spec(path: Path, seeds: list, axis: Optional[str], values: Optional[list], folder: Path) -> Path:
    """What one seed set trains at a look: its seeds alone, and, with `axis`, only those `values` of it
    (the arms, or the grid key's values, its open tests compare). No report: the look's full spec reads."""
    data = read_yaml_mapping(path)
    data["seeds"] = list(seeds)
    data.pop("replication_seeds", None)
    data.pop("report", None)
    data.setdefault("name", path.stem)
    if axis == "arm":
        data["arms"] = {name: arm for name, arm in data["arms"].items() if name in values}
    elif axis is not None:
        data["grid"] = {**data["grid"], axis: [v for v in data["grid"][axis] if v in values]}
    out = folder / f"train-{len(list(folder.iterdir()))}-{path.name}"
    out.write_text(dump_yaml(data))
    return out


def _points_per_seed(spec: SweepSpec, axis: Optional[str], values: Optional[list]) -> int:
    """Grid points one seed trains with `axis` cut to `values` (every point where axis is None)."""
    count = 1
    for name, options in spec.grid.items():
        count *= len(values) if name == axis and values is not None else len(options)
    return count


def undecided(spec: SweepSpec, runs) -> list[tuple[dict, str, list]]:
    """(test, seed-set name, its readings) for each paired test and seed set not decided under the
    spec's design (open, or undecided at its budget): what the progress lines and the next look read."""
    design = spec.report["sequential"]
    out = []
    for test, (_, found) in zip(report_tests(spec), replicated_verdicts(spec, runs)):
        if test["kind"] != "paired":
            continue
        margin = margin_of(spec, compared_metric(test), STEP_METRICS)
        for f in found:
            readings = set_readings(design, f.verdict.comparisons or [], margin)
            if not readings or any(r.outcome not in DECIDED for r in readings):
                out.append((test, f.name, readings))
    return out


def needed(spec: SweepSpec, runs, set_name: str, still: Optional[list] = None) -> tuple[Optional[str], Optional[list]]:
    """(axis, values) a seed set's next look must train: the values its open paired tests compare,
    where they all compare along one axis; (None, None) for every point (tests on several axes);
    (axis, []) when none is open on the set. `still`: undecided(spec, runs), where already read."""
    axes, values = set(), []
    for test, name, _ in undecided(spec, runs) if still is None else still:
        if name == set_name:
            axes.add(test["axis"])
            values += [v for v in [*test["treatment"], test["control"]] if v not in values]
    if len(axes) > 1:
        return None, None
    return (axes.pop() if axes else "arm"), values


def open_tests(spec, runs, still: Optional[list] = None) -> list[str]:
    """One line per paired test and seed set not decided under the spec's design (open, or undecided at
    its budget); empty when every one crossed a boundary. `still`: undecided(spec, runs), where read."""
    looks = spec.report["sequential"]["looks"]
    return [
        f"{test['statement']} ({name}): " + ("; ".join(reading_text(r, looks) for r in readings) or "no pairs yet")
        for test, name, readings in (undecided(spec, runs) if still is None else still)
    ]


def run_until_decided(
    spec_path: str, workers: int = 1, tracking_uri: Optional[str] = None, out_root: str = defaults.SWEEPS
) -> int:
    """Train the spec look by look until its paired tests are decided or its budget is spent."""
    path = Path(spec_path)
    spec = load_spec(path)
    validate_report(spec)
    design = spec.report.get("sequential")
    if not design or not design.get("streams"):
        raise UserInputError(
            f"{path}: --until-decided needs report.sequential with its streams; allowed: a spec that declares "
            f"looks and, per seed set, the seeds the looks take in order (docs/concepts/verdicts.md)"
        )
    journals = Path(defaults.REPRODUCE_JOURNALS)
    journals.mkdir(parents=True, exist_ok=True)
    sets = (
        {"seeds": "discovery", "replication_seeds": "replication"} if spec.replication_seeds else {"seeds": "all seeds"}
    )
    with tempfile.TemporaryDirectory(prefix="grpo-looks-") as tmp:
        wanted: dict = {key: (None, None) for key in sets}  # look 1 trains every point
        for k, pairs in enumerate(design["looks"], 1):
            look = _look_spec(path, design["streams"], pairs, Path(tmp))
            print(f"sweep {spec.name}: look {k} of {len(design['looks'])}, {pairs} pairs per seed set", flush=True)
            for key, set_name in sets.items():
                axis, values = wanted[key]
                if values == []:
                    print(f"sweep {spec.name}: look {k}, {set_name} seeds: every test decided there; trains nothing")
                    continue
                if axis is not None:
                    print(
                        f"sweep {spec.name}: look {k}, {set_name} seeds: trains {axis} {', '.join(map(str, values))} "
                        f"(what its open tests compare)",
                        flush=True,
                    )
                train = _training_spec(path, design["streams"][key][:pairs], axis, values, Path(tmp))
                journal = journals / f"until-decided-{spec.name}-look{k}-{key}-{os.getpid()}.log"
                code = run_sweep(
                    str(train),
                    workers=workers,
                    storage_url=journal_url(journal),
                    tracking_uri=tracking_uri,
                    out_root=out_root,
                )
                if code != 0:
                    return code
            at_look = load_spec(look, check_points=False)
            runs, _ = collect_runs(Path(out_root), at_look)
            still = undecided(at_look, runs)  # read once: the progress lines and the next look's points
            still_open = open_tests(at_look, runs, still)
            if not still_open:
                print(
                    f"sweep {spec.name}: every paired test decided at look {k} ({pairs} pairs per set); nothing more "
                    f"trains",
                    flush=True,
                )
                return 0
            wanted = {key: needed(at_look, runs, set_name, still) for key, set_name in sets.items()}
            left = sum((design["looks"][-1] - pairs) * _points_per_seed(at_look, *w) for w in wanted.values())
            for line in still_open:
                print(f"sweep {spec.name}: open: {line}", flush=True)
            if k < len(design["looks"]):
                print(f"sweep {spec.name}: at most {left} runs left in the budget", flush=True)
    print(
        f"sweep {spec.name}: budget spent ({design['looks'][-1]} pairs per set); open tests read undecided", flush=True
    )
    return 0
