"""The answers at a glance (sweeps/reporting/glance.py): docs/results.md's and README.md's tables
and sentences are the committed reports' verdicts, not typed, and their cells stay short."""

import json
import math
import re

import pytest

from conftest import ROOT
from sweeps.deciding.verdicts import Comparison, Verdict
from sweeps.reporting.glance import REPORTS, VERDICTS, anchor, blocks, glance_rows, main, markers, sentences
from sweeps.spec import SweepSpec


def _block(path, name) -> list[str]:
    text = path.read_text()
    start, end = markers(name)
    return text[text.index(start) + len(start) : text.index(end)].strip("\n").splitlines()


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_the_committed_tables_are_the_reports_verdicts():
    assert main(["--check"]) == 0  # docs/results.md and README.md hold exactly what the reports give
    for testbed, folder in REPORTS:  # and each verdicts.json is its REPORT.md's: every row there
        folder = ROOT / folder
        report = (folder / "REPORT.md").read_text()
        rows = [r for r in json.loads((folder / VERDICTS).read_text()) if r["testbed"] == testbed]
        assert rows, testbed
        for r in rows:
            assert f"| {r['question']} | **{r['verdict']}** |" in report, r["question"]
            assert (
                f"\n## {r['section']}" in report
                or f"\n## {r['section'].replace(' — ', ' on a CPU (float32) — ', 1)}" in report
            ), r["section"]


def test_no_table_cell_runs_past_30_words():
    for path, name in (
        (ROOT / "README.md", "answers"),
        (ROOT / "docs" / "results.md", "answers"),
        (ROOT / "docs" / "results.md", "superseded"),
    ):
        rows = [line for line in _block(path, name) if line.startswith("| ") and not line.startswith("|---")]
        assert len(rows) > 2, (path, name)
        for row in rows:
            for cell in _cells(row):
                assert len(cell.split()) <= 30, (path.name, cell)


def test_the_readme_links_each_row_to_its_report_section():
    for row in _block(ROOT / "README.md", "answers")[2:]:
        link = re.search(r"\]\((results/[^)#]+)#([^)]+)\)", row)
        assert link, row
        report = (ROOT / link.group(1)).read_text()
        assert link.group(2) in {anchor(h) for h in re.findall(r"^## (.+)$", report, flags=re.M)}, row


def _verdict(estimates) -> Verdict:
    sets = [
        (name, [Comparison("all runs", 8, est, low, high, 0.01, 0.0078, True)])
        for name, (est, low, high) in zip(("discovery", "replication"), estimates)
    ]
    return Verdict("warmup off learns sooner", "supported", "", "", facts={"n_per_set": [8, 8]}, sets=sets)


def test_a_row_holds_the_effect_margin_check_and_seeds_of_its_verdict():
    """Hand-built verdicts: each cell from the verdict's own numbers, bounds rounded outward; a spec
    none of whose runs finished gives its statements with "no finished runs yet"; a superseded
    regime says by which spec."""
    spec = SweepSpec(
        name="c2",
        base={},
        grid={"warmup_ratio": [0.0, 0.25]},
        seeds=[0],
        replication_seeds=[1],
        report={"tests": [], "margins": {"steps": 2}, "superseded_by": "r2_warmup_long"},
        path="experiments/real/cpu/r2_warmup_room.yaml",
    )
    test = {
        "kind": "paired",
        "statement": "s",
        "metric": "steps_to_learn",
        "axis": "warmup_ratio",
        "treatment": [0.0],
        "control": 0.25,
        "direction": "lower",
    }
    twin = {**test, "metric": "reward_auc", "twin_of": 0}
    v = _verdict([(-4.0, -8.4, -1.6), (-6.0, -8.0, -2.0)])
    (row,) = glance_rows("real model, CPU", "C2", spec, [test, twin], [v, Verdict("s", "no effect detected", "", "")])
    assert (row.verdict, row.auc, row.effect, row.margin, row.n) == (
        "supported",
        "no effect detected",
        "disc. −4 [−9, −1]; repl. −6 [−8, −2] steps",
        "±2 steps",
        "8 + 8",
    )
    assert (row.check, row.section, row.superseded_by) == ("–", "C2 — r2_warmup_room", "r2_warmup_long")
    (empty,) = glance_rows("tiny models", "C2", spec, [test, twin], [])
    assert (empty.question, empty.verdict, empty.effect) == ("s", "no finished runs yet", "–")
    nan = _verdict([(math.nan, math.nan, math.nan)] * 2)
    assert glance_rows("t", "C2", spec, [test], [nan])[0].effect == "–"  # no pairs yet: nothing to print
    assert sentences([row]) == [
        "- **C2**: On the real model, CPU: warmup off learns sooner: **supported** (disc. −4 [−9, −1]; repl. −6 "
        "[−8, −2] steps; margin ±2 steps)."
    ]
    assert anchor("C3 — r3_advantage_noise_long_cpu") == "c3--r3_advantage_noise_long_cpu"


def test_a_page_without_its_markers_is_refused(tmp_path, monkeypatch, capsys):
    import sweeps.reporting.glance as glance

    import shutil

    (tmp_path / "docs").mkdir()
    for name in blocks():
        (tmp_path / name).write_text("no markers here\n")
    for _, folder in REPORTS:  # the reports are whole: only the pages lack their blocks
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / folder / VERDICTS, tmp_path / folder / VERDICTS)
    monkeypatch.setattr(glance, "REPO", tmp_path)
    assert main([]) == 2 and "has not exactly one block answers" in capsys.readouterr().err
    assert (tmp_path / "README.md").read_text() == "no markers here\n"  # nothing half-written


def test_every_real_model_row_has_one_answer_wherever_it_is_printed():
    # the full reproduction's report (results/REPORT.md, rebuilt only by a full run) once printed the
    # real model's rows as they stood a week before results/real/cpu/REPORT.md answered them: a row
    # of the real model printed in both must read the same verdict, and the full report points to the
    # real model's report instead of copying it
    real = (ROOT / "results/real/cpu/REPORT.md").read_text()
    full = (ROOT / "results/REPORT.md").read_text()
    answers = {
        _cells(line)[1]: _cells(line)[2]
        for line in real.splitlines()
        if line.startswith("| ") and len(_cells(line)) >= 4 and _cells(line)[2].startswith("**")
    }
    copied = [_cells(line) for line in full.splitlines() if line.startswith("| real model, CPU · ")]
    assert all(answers.get(cells[1]) == cells[2] for cells in copied), [
        c[:3] for c in copied if answers.get(c[1]) != c[2]
    ]
    real_rows = {r["question"]: r["verdict"] for r in json.loads((ROOT / "results/real/cpu" / VERDICTS).read_text())}
    stale = [
        r["question"]
        for r in json.loads((ROOT / "results" / VERDICTS).read_text())
        if r["testbed"] == "real model, CPU" and real_rows.get(r["question"]) != r["verdict"]
    ]
    assert not stale, stale
    assert "## Real model on a CPU: in results/real/cpu/REPORT.md" in full


def test_the_readme_table_leaves_out_specs_without_a_finished_run():
    # a spec declared before its runs has no answer yet: docs/results.md lists it, the README's
    # table of answers does not
    from sweeps.reporting.glance import GlanceRow, readme_table

    row = dict(testbed=REPORTS[0][0], claim="C7", auc="–", effect="–", margin="–", check="–", n="–", section="C7 — x")
    rows = [
        GlanceRow(question="answered", verdict="supported", **row),
        GlanceRow(question="declared, not run", verdict="no finished runs yet", **row),
    ]
    table = readme_table(rows)
    assert len(table) == 3 and "answered" in table[2]


@pytest.mark.parametrize(
    "damage, needle",
    [
        ("missing", "results/real/cpu/verdicts.json is missing"),
        ("empty", "holds no row of the real model, CPU"),
        ("cut", "results/real/cpu/verdicts.json is not whole"),
        ("two blocks", "README.md has not exactly one block answers"),
    ],
)
def test_glance_writes_nothing_unless_every_report_is_whole_and_each_block_is_there_once(
    tmp_path, monkeypatch, capsys, damage, needle
):
    # a missing or empty verdicts file had rewritten README.md and docs/results.md without its rows,
    # exit 0; a cut one gave a traceback; a second copy of a block stayed stale and --check passed
    import shutil

    import sweeps.reporting.glance as glance

    for name in ("README.md", "docs/results.md", "results/verdicts.json", "results/real/cpu/verdicts.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    verdicts = tmp_path / "results/real/cpu/verdicts.json"
    if damage == "missing":
        verdicts.unlink()
    elif damage == "empty":
        verdicts.write_text("[]\n")
    elif damage == "cut":
        verdicts.write_text(verdicts.read_text()[:500])
    else:
        readme = (tmp_path / "README.md").read_text()
        start, end = markers("answers")
        block = readme[readme.index(start) : readme.index(end) + len(end)]
        (tmp_path / "README.md").write_text(readme + "\n" + block.replace("| C2 |", "| C2 (old) |") + "\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.md")}
    monkeypatch.setattr(glance, "REPO", tmp_path)
    for argv in ([], ["--check"]):
        assert glance.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.md")} == before
