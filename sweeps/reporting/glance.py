"""The answers at a glance: one row per claim test and testbed (the claim in plain words, the verdict,
the effect with its interval, the declared margin, the mechanism check, the seeds per set, the report
section), and one sentence per claim made of the same cells. `grpo reproduce` computes the rows from
the verdicts it writes into REPORT.md and saves them beside it (verdicts.json); this module's command
writes the tables and sentences of both committed reports into docs/results.md and README.md, between
their `glance` markers, so no number there is typed by hand:

    python -m sweeps.reporting.glance           # rewrite the blocks
    python -m sweeps.reporting.glance --check   # exit 1 where a block differs from what the reports give
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from ..deciding.replication import STEP_METRICS
from ..deciding.verdicts import Verdict, fmt_interval
from ..paths import REPO
from ..report_spec import margin_of, with_twins

VERDICTS = "verdicts.json"  # beside REPORT.md
REPORTS = (("real model, CPU", "results/real/cpu"), ("tiny models", "results"))  # testbed, report folder in the repo
MAX_WORDS = 30  # per README cell
SETS = {"discovery": "disc.", "replication": "repl.", "all seeds": "all"}
NO_RUNS = "no finished runs yet"  # the verdict of a spec none of whose runs finished


@dataclass
class Answers:
    """What one testbed's report sections give beyond their text: the forest plot's rows and the glance rows."""

    testbed: str
    forest: list = field(default_factory=list)
    glance: list = field(default_factory=list)


@dataclass
class GlanceRow:
    testbed: str
    claim: str  # C1…C7, positive_control, calibration
    question: str  # the test's statement, in the spec's words
    verdict: str
    auc: str  # the reward-AUC twin's verdict, or "–"
    effect: str  # per seed set, the paired difference with its 95% interval, or "–"
    margin: str  # the declared equivalence margin, or "–"
    check: str  # the mechanism check: passed, not engaged, not read, or "–" where none is declared
    n: str  # seeds (pairs) per set, or "–"
    section: str  # the report section's heading
    superseded_by: str = ""  # the spec whose regime replaced this one's (report.superseded_by), or ""


def effect_text(v: Verdict, metric: str) -> str:
    """Each seed set's first comparison, "disc. −4 [−8, −2]; repl. −6 [−8, −2]" (and how many more)."""
    if not v.sets or all(math.isnan(cs[0].estimate) for _, cs in v.sets if cs):
        return "–"
    parts = [
        f"{SETS.get(name, name)} {fmt_interval(cs[0].estimate, cs[0].low, cs[0].high, metric)}"
        for name, cs in v.sets
        if cs
    ]
    more = max((len(cs) for _, cs in v.sets), default=0) - 1
    unit = " steps" if metric in STEP_METRICS else ""
    return "; ".join(parts) + unit + (f" (+{more} more)" if more > 0 else "")


def _check(v: Verdict) -> str:
    if not v.checks:
        return "–"
    states = [c.passed for c in v.checks]
    return "not engaged" if False in states else "not read" if None in states else "passed"


def glance_rows(testbed: str, claim: str, spec, tests: list[dict], results: list[Verdict]) -> list[GlanceRow]:
    """One row per test of a spec (its reward-AUC twin folded in)."""
    heading = f"{claim} — {Path(spec.path).stem if spec.path else spec.name}"
    superseded = str(spec.report.get("superseded_by") or "")
    if not results:  # a spec none of whose runs finished yet
        return [
            GlanceRow(testbed, claim, t.get("statement", "–"), NO_RUNS, "–", "–", "–", "–", "–", heading, superseded)
            for t in tests
            if "twin_of" not in t
        ]
    rows = []
    for test, v, twin, metric in with_twins(tests, results):
        margin = margin_of(spec, metric, STEP_METRICS) if test["kind"] == "paired" else None
        unit = " steps" if metric in STEP_METRICS else ""
        n = " + ".join(map(str, v.facts["n_per_set"])) if v.facts.get("n_per_set") else "–"
        rows.append(
            GlanceRow(
                testbed,
                claim,
                v.statement,
                v.verdict + (f"; sequential: {v.sequential}" if v.sequential else ""),
                (twin.verdict + (f"; sequential: {twin.sequential}" if twin.sequential else "")) if twin else "–",
                effect_text(v, metric) if test["kind"] == "paired" else "–",
                f"±{margin:g}{unit}" if margin is not None else "–",
                _check(v),
                n,
                heading,
                superseded,
            )
        )
    return rows


def write_verdicts(rows: list[GlanceRow], report_dir: Path) -> Path:
    path = report_dir / VERDICTS
    path.write_text(json.dumps([asdict(r) for r in rows], indent=1, ensure_ascii=False) + "\n")
    return path


def read_verdicts(testbed: str, report_dir: Path) -> list[GlanceRow]:
    """The rows of one testbed from its committed report's verdicts.json ([] when it has none)."""
    path = report_dir / VERDICTS
    if not path.is_file():
        return []
    return [GlanceRow(**r) for r in json.loads(path.read_text()) if r["testbed"] == testbed]


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _report_path(testbed: str) -> str:
    return f"{dict(REPORTS)[testbed]}/REPORT.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


TABLE_HEAD = [
    "| claim | testbed | question | verdict | reward AUC | effect, 95% CI | margin | mechanism check | n per set "
    "| report section |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def table(rows: list[GlanceRow], link_prefix: Optional[str]) -> list[str]:
    """The rows as a Markdown table; the section a link (README: relative to the repository) or a path."""
    out = list(TABLE_HEAD)
    for r in rows:
        report = _report_path(r.testbed)
        where = (
            f"[{r.section}]({link_prefix}{report}#{anchor(r.section)})"
            if link_prefix is not None
            else f"`{report}` § {r.section}"
        )
        out.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    r.claim,
                    r.testbed,
                    r.question,
                    f"**{r.verdict}**",
                    r.auc,
                    r.effect,
                    r.margin,
                    r.check,
                    r.n,
                    where,
                )
            )
            + " |"
        )
    return out


def sentences(rows: list[GlanceRow]) -> list[str]:
    """One sentence per claim (calibration aside), made of its rows' cells only, testbed by testbed:
    nothing the table does not show."""
    out, claims = [], []
    for r in rows:
        if r.claim != "calibration" and r.claim not in claims:
            claims.append(r.claim)
    for claim in claims:
        by_testbed = []
        for testbed in dict.fromkeys(r.testbed for r in rows if r.claim == claim):
            parts = []
            for r in (r for r in rows if r.claim == claim and r.testbed == testbed):
                said = f"{r.question}: **{r.verdict}**"
                details = [d for d in (r.effect, f"margin {r.margin}" if r.margin != "–" else "–") if d != "–"]
                if r.check == "not engaged" and "not engaged" not in r.verdict:
                    details.append("mechanism not engaged")
                parts.append(said + (f" ({'; '.join(details)})" if details else ""))
            by_testbed.append(f"on the {testbed}: " + "; ".join(parts))
        text = "; ".join(by_testbed)
        out.append(f"- **{claim}**: {text[0].upper()}{text[1:]}.")
    return out


SUPERSEDED_HEAD = [
    "| claim | testbed | question | verdict | replaced by | report section |",
    "|---|---|---|---|---|---|",
]


def superseded_table(rows: list[GlanceRow]) -> list[str]:
    """The rows of regimes that others replaced: kept in the reports, listed apart."""
    return SUPERSEDED_HEAD + [
        "| "
        + " | ".join(
            _cell(c)
            for c in (
                r.claim,
                r.testbed,
                r.question,
                f"**{r.verdict}**",
                f"`{r.superseded_by}`",
                f"`{_report_path(r.testbed)}` § {r.section}",
            )
        )
        + " |"
        for r in rows
        if r.superseded_by
    ]


README_HEAD = [
    "| claim | question | verdict | effect, 95% CI | mechanism check | report section |",
    "|---|---|---|---|---|---|",
]


def readme_table(rows: list[GlanceRow]) -> list[str]:
    """The README's smaller table: the real model's current claims with runs (no placebos, nothing
    superseded, no spec still without a finished run: docs/results.md lists those)."""
    out = list(README_HEAD)
    for r in rows:
        if r.testbed != REPORTS[0][0] or r.claim == "calibration" or r.superseded_by or r.verdict == NO_RUNS:
            continue
        link = f"[{r.section}]({_report_path(r.testbed)}#{anchor(r.section)})"
        out.append(
            "| "
            + " | ".join(_cell(c) for c in (r.claim, r.question, f"**{r.verdict}**", r.effect, r.check, link))
            + " |"
        )
    return out


def whole_verdicts(testbed: str, report_dir: Path) -> list[GlanceRow]:
    """The rows of one testbed from its committed report's verdicts.json, refused in one line
    (UserInputError) unless the file is there, whole JSON, a list of rows, and holds some of this
    testbed's: the pages are written from every report or from none."""
    from grpo_core.util.errors import UserInputError

    path = report_dir / VERDICTS
    try:
        data = json.loads(path.read_text())
        rows = [GlanceRow(**r) for r in data if r["testbed"] == testbed]
    except FileNotFoundError:
        raise UserInputError(
            f"glance: {path} is missing; allowed: the verdicts.json `grpo reproduce` writes beside REPORT.md"
        ) from None
    except (ValueError, TypeError, KeyError) as exc:  # cut, not JSON, or not rows
        raise UserInputError(
            f"glance: {path} is not whole ({type(exc).__name__}); allowed: the verdicts.json "
            f"`grpo reproduce` writes, as it wrote it"
        ) from None
    if not rows:
        raise UserInputError(
            f"glance: {path} holds no row of the {testbed}; allowed: a report's verdicts.json with its rows"
        )
    return rows


def blocks() -> dict[str, dict[str, list[str]]]:
    """The generated blocks by file and name: docs/results.md's table with its sentences and its
    table of superseded regimes, README.md's smaller table."""
    rows = [r for testbed, d in REPORTS for r in whole_verdicts(testbed, REPO / d)]
    current = [r for r in rows if not r.superseded_by]
    return {
        "docs/results.md": {
            "answers": table(current, None) + [""] + sentences(current),
            "superseded": superseded_table(rows),
        },
        "README.md": {"answers": readme_table(rows)},
    }


def markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- glance {name}: generated by `python -m sweeps.reporting.glance` from the reports; do not edit -->",
        f"<!-- glance {name}: end -->",
    )


def replace_block(text: str, name: str, lines: list[str]) -> Optional[str]:
    """`text` with block `name` replaced by `lines` (None without its markers, or with them more
    than once: a second copy would stay stale)."""
    start_marker, end_marker = markers(name)
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start or text.count(start_marker) != 1 or text.count(end_marker) != 1:
        return None
    return text[:start] + start_marker + "\n" + "\n".join(lines) + "\n" + text[end:]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sweeps.reporting.glance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block is not the reports'")
    args = parser.parse_args(argv)
    from grpo_core.util.errors import UserInputError

    try:
        generated = blocks()
    except UserInputError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    stale, written = [], {}
    for name, named in generated.items():  # every page is made before any is written
        path = REPO / name
        text = new = path.read_text()
        for block, lines in named.items():
            new = replace_block(new, block, lines)
            if new is None:
                print(
                    f"glance: {name} has not exactly one block {block} (its markers: {markers(block)[0]} … "
                    f"{markers(block)[1]}); allowed: one each",
                    file=sys.stderr,
                )
                return 2
        if new != text:
            stale.append(name)
            written[path] = new
    if not args.check:
        for path, new in written.items():
            path.write_text(new)
    if args.check and stale:
        print(
            f"glance: {', '.join(stale)} differ from the reports' verdicts; run python -m sweeps.reporting.glance",
            file=sys.stderr,
        )
        return 1
    print(f"glance: {'checked' if args.check else 'wrote'} {', '.join(generated)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
