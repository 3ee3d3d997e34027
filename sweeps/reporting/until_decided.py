"""`grpo sweep SPEC --until-decided`: train a claim look by look until its paired tests are decided
or its budget is spent.

The spec declares its sequential design with its seed streams (`report.sequential: {looks, spending,
alpha, streams}`, sweeps/report_spec.py): at a look of n pairs each seed set's first n seeds of its
stream are trained (the run folders decide what is done, so a look already trained costs nothing and
a killed invocation goes on from them), then every paired test is read under the design on each seed
set (sweeps/deciding/sequential.py). While one of them is open on one set, the next look trains; once
none is, nothing more trains. Each look's sweep has an Optuna journal of its own (its spec has more
seeds than the last look's), in results/local/journals/.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

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
    runs share the sweep's folder."""
    data = read_yaml_mapping(path)
    for key, stream in streams.items():
        data[key] = list(stream[:pairs])
    data.setdefault("name", path.stem)
    out = folder / path.name
    out.write_text(dump_yaml(data))
    return out


def open_tests(spec, runs) -> list[str]:
    """One line per paired test and seed set not decided under the spec's design (open, or undecided at
    its budget); empty when every one crossed a boundary."""
    design = spec.report["sequential"]
    lines = []
    for test, (_, found) in zip(report_tests(spec), replicated_verdicts(spec, runs)):
        if test["kind"] != "paired":
            continue
        margin = margin_of(spec, compared_metric(test), STEP_METRICS)
        for f in found:
            readings = set_readings(design, f.verdict.comparisons or [], margin)
            if not readings or any(r.outcome not in DECIDED for r in readings):
                text = "; ".join(reading_text(r, design["looks"]) for r in readings) or "no pairs yet"
                lines.append(f"{test['statement']} ({f.name}): {text}")
    return lines


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
    with tempfile.TemporaryDirectory(prefix="grpo-looks-") as tmp:
        for k, pairs in enumerate(design["looks"], 1):
            look = _look_spec(path, design["streams"], pairs, Path(tmp))
            journal = journals / f"until-decided-{spec.name}-look{k}-{os.getpid()}.log"
            print(f"sweep {spec.name}: look {k} of {len(design['looks'])}, {pairs} pairs per seed set", flush=True)
            code = run_sweep(
                str(look),
                workers=workers,
                storage_url=journal_url(journal),
                tracking_uri=tracking_uri,
                out_root=out_root,
            )
            if code != 0:
                return code
            at_look = load_spec(look, check_points=False)
            runs, _ = collect_runs(Path(out_root), at_look)
            still_open = open_tests(at_look, runs)
            if not still_open:
                print(
                    f"sweep {spec.name}: every paired test decided at look {k} ({pairs} pairs per set); nothing more "
                    f"trains",
                    flush=True,
                )
                return 0
            for line in still_open:
                print(f"sweep {spec.name}: open: {line}", flush=True)
    print(
        f"sweep {spec.name}: budget spent ({design['looks'][-1]} pairs per set); open tests read undecided", flush=True
    )
    return 0
