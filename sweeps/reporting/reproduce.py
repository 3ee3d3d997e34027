"""`grpo reproduce [--quick]`: one sweep per claim spec in experiments/, then the report.

Full: results/REPORT.md and results/figures/ (committed), run folders under
results/local/reproduce/. Quick: fewer seeds and steps (each spec's `quick`), everything under
results/local/quick/, so the committed report is never overwritten."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from grpo_core.util import defaults
from grpo_core.config.schema import GRPOConfig
from grpo_core.tasks.rewards import PAYS_FOR_ECHO
from grpo_core.util.yaml_files import dump_yaml, read_yaml_mapping
from grpo_core.util.errors import UserInputError
from grpo_core.util.files import check_writable_folder
from grpo_core.mlflow_store import check_tracking_uri
from grpo_core.mlflow_logging import git_commit
from grpo_core.record.provenance import machine, versions

from ..driving.adopt import finished_folders, finished_run
from ..driving import time_limit
from ..driving.driver import run_sweep
from ..paths import REPO, REAL_CPU_RESULTS, REAL_EXPERIMENTS, REAL_RESULTS, experiments_dir
from ..deciding.peer import peer_section
from ..deciding.power import TARGET_TEXT
from ..deciding.gates import NO_POSITIVE_CONTROL, placebo_gate, placebo_record, POSITIVE_CONTROL, positive_record
from .report import _missing_points, bases_table, borrowers, claim_section
from .summary import SUMMARY_HEAD, _wall_time, cpu_math_line, summary_row, timing_lines, versions_warning
from .forest import forest_png, forest_rows
from .glance import Answers, glance_rows, write_verdicts
from .positive_gate import SetupSensitivity, effects_brief, positive_gate, with_gate_lines
from .report_inputs import collect_runs
from ..report_spec import report_tests, validate_report, with_twins
from ..spec import load_spec
from ..driving.progress import format_duration
from ..driving.storage import check_distinct, check_storage, journal_url



REAL_CPU_TESTBED = "real model, CPU"


def claim_specs(experiments: Path) -> list[Path]:
    """Specs with a `claim` and a `report` section, in file order."""
    specs = {p: read_yaml_mapping(p) for p in sorted(experiments.glob("*.yaml"))}
    # the calibration (placebo) spec first: the verdicts after it rest on its metric; then the positive
    # control: the "no effect detected" verdicts after it rest on the testbed's power to detect
    paths = sorted((p for p, d in specs.items() if {"claim", "report"} <= set(d)),
                   key=lambda p: (specs[p]["claim"] != "calibration", specs[p]["claim"] != POSITIVE_CONTROL, p.name))
    if not paths:
        what = ("is a file" if experiments.is_file() else "no such folder" if not experiments.exists()
                else "no claim specs in it")
        raise UserInputError(f"--experiments {experiments}: {what}; allowed: a folder of claim specs (YAML files "
                             f"with `claim` and `report`)")
    return paths


NEEDS_FULL_RUN = "**needs the full run** (`grpo reproduce`: these seeds or steps cannot decide it)"


def derive_spec(path: Path, quick: bool, max_steps: Optional[int], seeds: Optional[int], spec_dir: Path) -> Path:
    """Write the spec this invocation runs: quick overrides, test trims, and a name of its own
    so quick and full sweeps never share an Optuna study."""
    data = read_yaml_mapping(path)
    suffix = []
    if quick:
        quick_over = data.get("quick") or {}  # its keys are checked with the report section (validate_report)
        data["seeds"] = quick_over.get("seeds", data["seeds"][:2])
        data["replication_seeds"] = quick_over.get("replication_seeds", (data.get("replication_seeds") or [])[:2])
        for axis, values in (quick_over.get("grid") or {}).items():  # checked by validate_report
            data["grid"][axis] = values
        data["base"] = {**(data.get("base") or {}), "max_steps": quick_over.get("max_steps", 50)}
        report = data.get("report") or {}  # tests marked `quick: false` cannot be decided in a quick run
        tests = report.get("tests") or []
        report["needs_full_run"] = [t.get("statement", "") for t in tests if t.get("quick") is False]
        kept = [i for i, t in enumerate(tests) if t.get("quick") is not False]
        report["tests"] = [tests[i] for i in kept]
        report["mechanism"] = _kept_checks(report.get("mechanism") or [], kept)
        data["report"] = report
        suffix.append("quick")
    if max_steps is not None:
        data["base"] = {**(data.get("base") or {}), "max_steps": max_steps}
        suffix.append(f"steps{max_steps}")
    if seeds is not None:
        data["seeds"] = data["seeds"][:seeds]
        data["replication_seeds"] = (data.get("replication_seeds") or [])[:seeds]
        suffix.append(f"seeds{seeds}")
    base = data.get("base") or {}
    window = base.get("stl_window", GRPOConfig.stl_window)
    if (quick or max_steps is not None) and 2 * window > base.get("max_steps", GRPOConfig.max_steps):
        # shortened runs keep a window they can fill and confirm (steps_to_learn needs 2 windows)
        data["base"] = {**base, "stl_window": max(1, base["max_steps"] // 2)}
    if suffix:
        data["name"] = "-".join([data.get("name", path.stem), *suffix])
    spec_dir.mkdir(parents=True, exist_ok=True)
    out = spec_dir / path.name
    out.write_text(dump_yaml(data))
    return out


def _kept_checks(checks: list, kept: list[int]) -> list:
    """A spec's manipulation checks for its trimmed tests: each check's `tests` renumbered to the
    kept tests' new places; a check that gated only dropped tests goes with them."""
    out = []
    for check in checks:
        if not isinstance(check, dict) or check.get("tests") is None:
            out.append(check)  # gates every test (or malformed: validate_report names it)
            continue
        places = [kept.index(i) for i in check["tests"] if i in kept]
        if places:
            out.append({**check, "tests": places})
    return out


def _pending(spec_path: Path, runs_root: Path) -> bool:
    """Whether the sweep of this spec still has grid points without a finished run folder."""
    spec = load_spec(spec_path)
    return len(finished_folders(runs_root, spec)) < len(spec.grid_points())


def _sections(paths: list[Path], derived: list[Path], runs_root: Path, fig_dir: Path, report_dir: Path,
              command: str, check_points: bool = True, peer_root: Optional[Path] = None,
              answers: Optional[Answers] = None) -> tuple[list[str], list[str], list]:
    """Per spec its report section, a summary row per verdict (its reward-AUC twin folded in), and
    all finished runs. Where the specs have a calibration (placebo) spec, it comes first
    (claim_specs); a later verdict that rests on steps_to_learn is withheld (report.withheld) unless
    the placebos of its runs' set-up passed (report.placebo_gate: a placebo of another reward, length
    or batch, or one that has not run yet, says nothing about it; one still in training neither
    opens the gate nor closes it unless one of its runs learned). The positive control comes next
    (positive_gate), and a claim spec's test may declare itself its regime's `known_effect`: a
    "no effect detected" is withheld (report.unproven) unless a known effect of its runs' set-up
    (gates.sensitivity_gate: the placebo's set-up keys, over at least as many steps) passed, as it is
    on a testbed without one. A second positive control of a set-up (a graded one) takes over the
    gate once every grid point of it has a finished run. `peer_root`: where TRL's runs of a spec's arm are
    (`grpo peer`, grpo_peer/): a spec with some gets a peer-check subsection (sweeps/deciding/peer.py).
    `answers`: each verdict's forest-plot and glance rows are appended to its lists."""
    sections, rows, all_runs, placebos = [], [], [], []  # type: list, list, list, list
    claims = [read_yaml_mapping(p).get("claim") for p in paths]
    insensitive = (None if POSITIVE_CONTROL in claims else
                   f"{NO_POSITIVE_CONTROL} (an intervention known to speed learning, `claim: {POSITIVE_CONTROL}`), "
                   f"so it has not shown it could detect an effect")
    lent = borrowers(runs_root, [read_yaml_mapping(p).get("name", Path(p).stem) for p in derived])
    gates = {}  # each positive control: its section's index, verdicts, tests, record
    controls: list = []  # every known effect so far (positive-control specs, known_effect tests), by set-up
    superseded: list = []  # (section index, the spec that superseded it)
    old_rows: list = []  # their summary rows
    sensitivity = insensitive if insensitive is not None else SetupSensitivity(controls)
    for original, p in zip(paths, derived):
        spec = load_spec(p, check_points=check_points)
        spec.path = str(original)
        runs, unfinished = collect_runs(runs_root, spec)
        all_runs += runs
        claim = spec.text.get("claim", spec.name)
        untrusted = placebo_gate(placebos, runs) if "calibration" in claims and claim != "calibration" else None
        known: list = []
        text, results = claim_section(spec, runs, unfinished, fig_dir, report_dir, command, untrusted,
                                      None if claim == POSITIVE_CONTROL else sensitivity, lent.get(spec.name), known)
        controls += known
        if peer_root is not None and (peer_root / spec.name).is_dir():
            peer_text, outcome = peer_section(spec, runs, peer_root / spec.name)
            text += ("\n" + peer_text) if peer_text else ""
            if outcome is not None:
                rows.append(f"| {claim} | peer check: TRL's GRPOTrainer against grpo-lab on one arm "
                            f"(steps_to_learn, reward AUC) | **{outcome}** | – | – | – | – | – |")
        sections.append(text)
        if claim == "calibration":
            placebos.append(placebo_record(Path(original).stem, runs, results, not _missing_points(spec, runs)))
        tests = report_tests(spec)
        if claim == POSITIVE_CONTROL:
            stem = Path(original).stem
            record = positive_record(stem, runs, positive_gate(stem, results, tests), not _missing_points(spec, runs),
                                     effects_brief(results, tests))
            controls.append(record)
            gates[stem] = (len(sections) - 1, results, tests, record)
        if answers is not None:
            if claim != "calibration" and not spec.report.get("superseded_by"):  # the figure: current regimes
                answers.forest.extend(forest_rows(answers.testbed, claim, spec, tests, results))
            answers.glance.extend(glance_rows(answers.testbed, claim, spec, tests, results))
        if spec.report.get("superseded_by"):  # kept for the record, after the current regimes (below)
            superseded.append((len(sections) - 1, spec.report["superseded_by"]))
            old_rows += [summary_row(claim, v, twin) for _, v, twin, _ in with_twins(tests, results)]
            continue
        rows += [summary_row(claim, v, twin) for _, v, twin, _ in with_twins(tests, results)]
        if not results and not spec.report.get("needs_full_run"):  # a spec none of whose runs finished yet
            rows += [f"| {claim} | {t.get('statement', '–')} | **no finished runs yet** | – | – | – | – | – |"
                     for t in spec.report["tests"]]
        rows += [f"| {claim} | {statement} | {NEEDS_FULL_RUN} | – | – | – | – | – |"
                 for statement in spec.report.get("needs_full_run", [])]
    sections = with_gate_lines(sections, gates, controls)  # each positive control's, per set-up
    if superseded:  # the superseded regimes after the current ones, with their own table
        old = [at for at, _ in superseded]
        names = ", ".join(sorted({f"`{by}`" for _, by in superseded}))
        part = "\n".join(["## Superseded regimes", "",
                          f"Regimes a later spec replaced ({names}): their sections follow, marked superseded, kept "
                          f"for the record; their rows are not in the first table.", "",
                          *SUMMARY_HEAD, *old_rows, ""])
        sections = [t for i, t in enumerate(sections) if i not in old] + [part] + [
            t.replace("\n\n", f"\n\n*Superseded by `{by}`: kept for the record, out of the first table.*\n\n", 1)
            for at, by in superseded for t in [sections[at]]]
    return sections, rows, all_runs


REAL_CPU_ELSEWHERE = (
    "## Real model on a CPU: in results/real/cpu/REPORT.md\n\n"
    "The real model's verdicts on a CPU (SmolLM2-135M-Instruct with LoRA, `experiments/real/cpu/`) are printed in "
    "one place, `results/real/cpu/REPORT.md`, rebuilt from their committed run folders whenever a run lands "
    "(`grpo reproduce --real-cpu --report-only`). This report is rebuilt only by a full reproduction (its tiny-model "
    "runs are not committed), so it does not repeat them: a copy here would go on printing answers that later runs "
    "have replaced.\n")


def _real_sections(fig_dir: Path, report_dir: Path, answers: Optional[Answers] = None) -> tuple[list[str], list[str], list]:
    """The real-model sections, rebuilt from the committed run folders (no GPU needed); after them
    a pointer to the real model's CPU report (REAL_CPU_ELSEWHERE), whose rows are printed there only."""
    if not REAL_EXPERIMENTS.is_dir():
        return [], [], []
    paths = claim_specs(REAL_EXPERIMENTS)
    runs_root = REAL_RESULTS / "runs"
    if not runs_root.is_dir():
        names = ", ".join(f"`{p.name}`" for p in paths)
        sections = ["## Real model (SmolLM2-135M-Instruct) — not run yet on a GPU", "",
                    f"The specs ({names} in `experiments/real/`) are ready and tested for 2 steps on a CPU; they "
                    f"need a GPU: `grpo fetch-model && grpo reproduce --real` on a GPU machine trains them into "
                    f"`{runs_root}` (committed), and every later `grpo reproduce` rebuilds these sections from there.", ""]
        rows = [f"| real model · {read_yaml_mapping(p).get('claim')} | – | **not run yet (needs a GPU)** | – | – | – | – | – |" for p in paths]
        runs: list = []
    else:
        command = "grpo reproduce --real (sections rebuilt from the committed run folders)"
        sections, rows, runs = _sections(paths, paths, runs_root, fig_dir, report_dir, command, check_points=False)
        rows = [r.replace("| ", "| real model · ", 1) for r in rows]
    return sections + [REAL_CPU_ELSEWHERE], rows, runs


def sections_with_echo_appendix(paths: list[Path], derived: list[Path], runs_root: Path, fig_dir: Path,
                                report_dir: Path, command: str, check_points: bool = True,
                                peer_root: Optional[Path] = None,
                                answers: Optional[Answers] = None) -> tuple[list[str], list[str], list]:
    """_sections for the specs whose rewards cannot be echoed, then an appendix with those whose
    rewards pay for an echo of the question (PAYS_FOR_ECHO), with its own table: the headline rows
    are the first group's only. Each group has its own placebos and positive control."""
    echo = [i for i, p in enumerate(paths) if rewards_of_spec(p) & PAYS_FOR_ECHO]
    rest = [i for i in range(len(paths)) if i not in echo]
    sections, rows, runs = _sections([paths[i] for i in rest], [derived[i] for i in rest], runs_root, fig_dir,
                                     report_dir, command, check_points, peer_root, answers)
    if echo:
        echo_sections, echo_rows, echo_runs = _sections([paths[i] for i in echo], [derived[i] for i in echo], runs_root,
                                                        fig_dir, report_dir, command, check_points, peer_root)
        sections += _echo_appendix([paths[i] for i in echo], echo_sections, echo_rows)
        runs += echo_runs
    return sections, rows, runs


def rewards_of_spec(path: Path) -> set[str]:
    """The reward functions a spec's runs use: `reward_funcs` in its base or grid, else the defaults
    of its dataset or task."""
    from grpo_core.tasks.catalog import default_rewards

    data = read_yaml_mapping(path)
    base, grid = data.get("base") or {}, data.get("grid") or {}
    named = {r for r in base.get("reward_funcs") or [] if isinstance(r, str)}
    named |= {r for value in grid.get("reward_funcs") or [] for r in (value or []) if isinstance(r, str)}
    if named:
        return named
    return set(default_rewards(base.get("dataset"), base.get("task", GRPOConfig.task)))


def _echo_appendix(paths: list[Path], sections: list[str], rows: list[str]) -> list[str]:
    """The claims that rest on a reward paying for an echo of the question, apart from the headline
    table: their own summary, and their sections a level down."""
    names = ", ".join(sorted(PAYS_FOR_ECHO))
    return ["\n".join(["## Appendix: the real model on a CPU under a reward that pays for echoing the question", "",
            f"These specs ({', '.join(f'`{p.name}`' for p in paths)}) reward with {names}, which evaluates what it "
            f"parses: a reply that restates the question (`15+13 =`) scores 1, so part of what their steps_to_learn "
            f"times is how fast the model learns to echo. Their completions in each section show it. They are kept "
            f"for that record, with their own placebo; the verdicts above, under last_number, are the ones this "
            f"report stands on.", "", *SUMMARY_HEAD, *[r.replace("| ", "| appendix · ", 1) for r in rows], ""]),
            *[re.sub(r"(?m)^(#{2,}) ", r"#\1 ", text) for text in sections]]  # every heading a level down


def reproduce(quick: bool = False, workers: int = 2, experiments: Optional[str] = None, out: Optional[str] = None,
              max_steps: Optional[int] = None, seeds: Optional[int] = None, storage: Optional[str] = None,
              tracking_uri: Optional[str] = None, real: bool = False, real_cpu: bool = False,
              report_only: bool = False, stop_after: float | str | None = None) -> int:
    """Train every claim spec's grid, then write the report (`report_only`: write it from the run
    folders as they are, training nothing: what is missing is named). Without `storage`, each invocation
    has an Optuna journal of its own, so the run folders alone decide what is done
    (sweeps/driving/adopt.py): a rerun trains only the points without a finished folder (a deleted or
    damaged one is trained again), and a suite can be run in parts. `real_cpu`: the real-model
    claims on a CPU (experiments/real/cpu/), into results/real/cpu/runs/ (committed). `stop_after`
    (seconds, or "1h30m"): start no trial once that much time has passed (`grpo sweep --stop-after`);
    the report is written from what finished, and the exit code is 3 when points are left."""
    if real and real_cpu:
        raise UserInputError("--real and --real-cpu: choose one; allowed: --real (a GPU) or --real-cpu")
    if stop_after is not None and report_only:
        raise UserInputError("--stop-after with --report-only: nothing trains; allowed: one of them")
    limit_s = None if stop_after is None else time_limit.check_duration(stop_after)
    start_until = None if limit_s is None else time_limit.now() + limit_s
    started = time.perf_counter()
    for flag, value in (("--workers", workers), ("--seeds", seeds), ("--max-steps", max_steps)):
        if value is not None and value < 1:
            raise UserInputError(f"{flag}: got {value}; allowed: an integer ≥ 1")
    check_distinct(storage, tracking_uri or defaults.TRACKING_URI)
    check_tracking_uri(tracking_uri or defaults.TRACKING_URI)
    check_storage(storage)
    paths = claim_specs(experiments_dir(experiments, real, real_cpu))
    for p in paths:  # every spec and its report section is checked before anything runs (--report-only builds
        validate_report(load_spec(p, check_points=not report_only))  # no config: the model need not be here)
    if real or real_cpu:  # the real-model runs are committed: config, metrics and summary of each are small
        committed, quick_dir = (REAL_CPU_RESULTS, Path(defaults.QUICK_REAL) / "cpu") if real_cpu else \
            (REAL_RESULTS, Path(defaults.QUICK_REAL))
        report_dir = Path(out) if out else (quick_dir if quick else committed)
        work = report_dir
    else:
        report_dir = Path(out) if out else (Path(defaults.QUICK) if quick else Path("results"))
        work = report_dir if (quick or out) else Path(defaults.REPRODUCE)
    runs_root, spec_dir, fig_dir = work / "runs", work / "specs", report_dir / "figures"
    full_report = not (real or real_cpu or quick or out)  # results/REPORT.md: both testbeds, the tiny runs local
    for folder in dict.fromkeys((report_dir, work)):  # before anything is trained or written
        check_writable_folder(folder, "--out" if out else "the report folder")
    before = sum(finished_run(folder) is not None for folder in Path(runs_root).glob("*/trial-*"))
    if report_only and before == 0 and full_report and (report_dir / "REPORT.md").is_file():
        # the tiny models' runs are not committed: on a fresh clone --report-only would turn every
        # verdict of the committed report into "no finished runs yet"
        raise UserInputError(f"--report-only: {runs_root} holds no finished run, so the report would replace every "
                             f"verdict of {report_dir / 'REPORT.md'} with 'no finished runs yet'; allowed: "
                             f"`grpo reproduce` first (trains the missing runs), --out DIR (a report elsewhere), "
                             f"or `grpo reproduce --real-cpu --report-only` (its runs are committed)")
    full_only = [p for p in paths if quick and not read_yaml_mapping(p).get("quick")]  # too costly for --quick
    paths = [p for p in paths if p not in full_only]
    with tempfile.TemporaryDirectory() as staging:  # derived specs are checked before any is written
        for p in paths:
            load_spec(derive_spec(p, quick, max_steps, seeds, Path(staging)), check_points=not report_only)
    derived = [derive_spec(p, quick, max_steps, seeds, spec_dir) for p in paths]

    if storage is None and not report_only:  # the run folders decide what is done: a journal of its own
        journal = Path(defaults.REPRODUCE_JOURNALS) / f"journal-{datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.log"
        journal.parent.mkdir(parents=True, exist_ok=True)
        storage = journal_url(journal)
        print(f"grpo reproduce: this invocation's Optuna journal: {journal} (`grpo trials SPEC --storage "
              f"{storage}` lists a sweep's trials)", flush=True)
    failures, trained, stopped = 0, False, []
    for i, p in enumerate(derived if not report_only else [], 1):  # --report-only: the folders as they are
        left_s = None if start_until is None else start_until - time_limit.now()
        if left_s is not None and left_s <= 0:  # --stop-after has passed: no sweep starts
            stopped += [p.stem] if _pending(p, runs_root) else []
            continue
        print(f"== [{i}/{len(derived)}] {p.stem} (elapsed {(time.perf_counter() - started) / 60:.1f} min)", flush=True)
        trained |= _pending(p, runs_root)
        code = run_sweep(str(p), workers=workers, storage_url=storage, tracking_uri=tracking_uri,
                         out_root=str(runs_root), stop_after=left_s)
        stopped += [p.stem] if code == time_limit.EXIT_TIME_LIMIT else []
        failures += code not in (0, time_limit.EXIT_TIME_LIMIT)
    wall = time.perf_counter() - started

    command = ("grpo reproduce" + (" --real" if real else "") + (" --real-cpu" if real_cpu else "")
               + (" --quick" if quick else "") + (" --report-only" if report_only else "")
               + (f" --workers {workers}" if workers != 2 else ""))
    if max_steps is not None or seeds is not None:
        command += (f" --max-steps {max_steps}" if max_steps is not None else "") + (f" --seeds {seeds}" if seeds else "")
    testbed = REAL_CPU_TESTBED if real_cpu else "real model, GPU" if real else "tiny models"
    answers = Answers(testbed)  # the forest plot's and glance tables' rows, real model first, then the CPU testbed's
    if real_cpu:  # claims under a reward that pays for an echo of the question: an appendix
        sections, summary_rows, all_runs = sections_with_echo_appendix(paths, derived, runs_root, fig_dir, report_dir,
                                                                       command, not report_only, work / "peer",
                                                                       answers=answers)
    else:
        sections, summary_rows, all_runs = _sections(paths, derived, runs_root, fig_dir, report_dir, command,
                                                     not report_only, answers=answers)
    for p in full_only:
        spec = load_spec(p, check_points=False)
        summary_rows += [f"| {spec.text.get('claim', spec.name)} | {t['statement']} | {NEEDS_FULL_RUN} | – | – | – | – | – |"
                         for t in spec.report["tests"]]
    real_runs: list = []  # the full report's real-model runs: committed, never trained by this command
    if full_report:  # the real model's sections first, then the CPU testbed's
        real_answers = Answers(REAL_CPU_TESTBED)  # (not `real`: the flag decides below where the plot is copied)
        real_sections, real_rows, real_runs = _real_sections(fig_dir, report_dir, real_answers)
        answers = Answers(testbed, real_answers.forest + answers.forest, real_answers.glance + answers.glance)
        sections, summary_rows, all_runs = real_sections + sections, real_rows + summary_rows, real_runs + all_runs

    if (warning := versions_warning(all_runs)):
        print(warning, file=sys.stderr, flush=True)
    timing_path = work / "timing.json"
    if report_only and not timing_path.is_file():  # nothing trained here, and no record of an invocation that did
        dates = sorted({r.summary.get("date", "") for r in all_runs} - {""})
        timing = {"wall_time_s": None, "date": dates[-1] if dates else datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                  "commit": None}
    elif trained or not timing_path.is_file():  # a rerun that trains nothing keeps the timing of the run that did
        timing_path.parent.mkdir(parents=True, exist_ok=True)
        timing_path.write_text(json.dumps({"wall_time_s": wall, "quick": quick, "command": command,
                                           "commit": git_commit(), "runs_before": before,
                                           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")}, indent=2) + "\n")
    if timing_path.is_file():
        timing = json.loads(timing_path.read_text())
    report_dir.mkdir(parents=True, exist_ok=True)
    quick_timing = Path(defaults.QUICK) / "timing.json"
    times = timing_lines(timing, _wall_time(all_runs), workers, quick, _wall_time(real_runs), len(real_runs))
    if not quick and quick_timing.is_file():
        qt = json.loads(quick_timing.read_text())
        times.append(f"`grpo reproduce --quick` on this machine: {qt['wall_time_s'] / 60:.1f} min wall ({qt['date']})")
    whose = "the CPU testbed's " if real_runs else ""  # the real model's runs were trained elsewhere, in parts
    header = [
        "# grpo-lab: do the GRPO claims hold?",
        "",
        f"Generated by `{command}`: {whose}runs trained "
        f"{'in parts, the last ' if timing.get('runs_before') else ''}on "
        f"{timing['date']} at commit "
        + (f"`{timing['commit'][:12]}`" if timing.get("commit") else "(not recorded here: see each MLflow run's git_commit tag)")
        + f", report written at commit `{git_commit()[:12]}`.",
        f"Machine: {machine()}. Versions: {', '.join(f'{k} {v}' for k, v in versions().items())}.",
        "Timing: " + "; ".join(times) + ".",
        "",
        "Every number below comes from the runs of this command; each verdict is computed from the "
        "statistics by `sweeps/deciding/verdicts.py` (never typed by hand). **Steps-to-learn** (`grpo_core/record/run_metrics.py`): "
        "the first step at which the trailing moving average of the training reward over a full window of "
        "w = stl_window steps (so never below w: the floor stated in each table) reaches baseline + δ and "
        "from which it stays ≥ baseline + δ/2 to the end of the run, with at least w steps after it; the **baseline** is the untrained policy's reward on "
        "training prompts drawn and sampled as in training, with a standard error ≤ δ/4, one value per set-up "
        "whatever machine trained the run (where the testbed records one in `baselines.json` beside its run folders, "
        "every run of that set-up is measured against it: `sweeps/deciding/baselines.py`). Runs that never "
        "learn are kept as censored (`not learned`): medians with 95% percentile-bootstrap intervals. "
        "**Comparisons are paired by seed** (runs with one seed share their prompts): two-sided Wilcoxon "
        "signed-rank tests (exact), or Friedman's test across several levels, Holm-adjusted within each test; "
        "the effect is the Hodges-Lehmann paired difference (treatment − control; never-learned runs counted "
        "at max_steps, which understates their difference) with its exact 95% interval. **Verdicts**: "
        "*supported* (significant in the claimed direction), *contradicted* (significant in the opposite "
        "direction), *no effect detected* (with the largest effect the intervals still allow), "
        "*inconclusive* (too few seeds, or nothing learned to compare). The placebo section checks that a run "
        "that cannot learn never gets a steps_to_learn; a verdict that reads steps_to_learn is withheld "
        "(*inconclusive (placebo not passed)*, with what the runs alone read) unless a placebo of its runs' "
        "set-up (model, data, reward, completion length, batch, temperature, window, δ; over at least as many "
        "steps) has all its runs finished and reads supported, and no placebo run of that set-up got a "
        "steps_to_learn (a placebo still in training opens no gate and closes none until one of its runs learns). "
        "The **positive control** section checks that the testbed detects an effect known to exist (a larger "
        "learning rate learns sooner); unless it reads supported, every *no effect detected* after it is withheld "
        "(*inconclusive (positive control not passed)*, or *(no positive control)* on a testbed without one). "
        "**Reward AUC**: every test on steps_to_learn has a twin on the mean training reward over the run, with "
        "its own verdict (an effect finer than one step shows there). **What a test could detect**: the pairs "
        "per seed set, and the smallest effect each set alone detects with 80% power, simulated with the "
        "report's own test (`sweeps/deciding/power.py`: the comparison's paired differences, centered and resampled, "
        "shifted by the effect; Holm's first step over the test's comparisons); beside it the control arm's "
        "median and how many of its runs never learned, and for a test in steps the pairs per set its differences "
        f"need to detect the target effect, {TARGET_TEXT}; a test across several levels (Friedman's) the same, "
        "with one level shifted from the others as the effect (each seed's differences to the first level, "
        "which stands as the control). Reward curves: mean over seeds with a 95% normal band.",
        "",
        "**Replication.** Every claim runs its grid on two disjoint seed sets, *discovery* (the spec's `seeds`) "
        "and *replication* (`replication_seeds`); each test is computed on each set alone, exactly as above "
        "(Holm within the set), and a comparison reads *supported* or *contradicted* only when both sets are "
        "significant in the same direction. Where one set is significant and the other is not, or points the "
        "other way, it reads **not replicated**; *no effect detected* needs both sets non-significant with "
        "bounded intervals; each test's table shows both sets' p-values and intervals side by side. Why this "
        "design: it needs no argument about its error rate (the sets share no seed, so no prompt or sampling "
        "stream; under the null a replicated false positive in a given direction has probability ≤ 0.025², and "
        "a real effect that is significant half the time replicates a quarter of the time: the price is power), "
        "and a verdict no longer flips when rounding moves one borderline p across 0.05 (the reason it was "
        "built: a summation-order change moved two verdicts of an earlier report); adding seeds to borderline "
        "cells would spend fewer runs but needs an alpha-spending rule and makes the seed count depend on the "
        "data. Seed counts per set are chosen so that each set alone can reach Holm-adjusted p < 0.05.",
        "",
        cpu_math_line(all_runs),
        "",
        *bases_table(all_runs),
        "",
        *SUMMARY_HEAD,
        *summary_rows,
        "",
        "Rows whose sections name a shared arm rest on the same runs of that arm (copied between sweeps, the "
        "same config and seeds): they are not independent evidence, and agreeing verdicts among them count once.",
        "",
    ]
    if (plot := forest_png(answers.forest, fig_dir / "forest.png")) is not None:  # the one picture, before the tables
        header[2:2] = [f"![Every claim's effect, per seed set and testbed]({plot.relative_to(report_dir).as_posix()})",
                       ""]
        if not (quick or out or real):  # the committed reports' pictures, shown atop docs/results.md
            shutil.copyfile(plot, REPO / "docs" / ("forest-real-cpu.png" if real_cpu else "forest.png"))
    report = "\n".join(header + sections)
    (report_dir / "REPORT.md").write_text(report)
    write_verdicts(answers.glance, report_dir)  # the glance tables' source (sweeps/reporting/glance.py)
    print(f"report: {report_dir / 'REPORT.md'} ({wall / 60:.1f} min this invocation)")
    if stopped:
        print(f"grpo reproduce: stopped starting trials after {format_duration(limit_s)} "
              f"(--stop-after); {len(stopped)} spec(s) with points left ({', '.join(stopped)}): run the same command "
              f"again to go on")
    return 1 if failures else time_limit.EXIT_TIME_LIMIT if stopped else 0
