"""A declaration (margins, mechanism thresholds) is dated by what it says: pre-registered only when the
value in force before the runs' first commit is the value used; else post hoc, or "cannot be dated"."""

import subprocess
from pathlib import Path

import pytest
import yaml

from sweeps.reporting.declared import margins_line, mechanism_line

CHECK = {
    "what": "the loss sits at zero",
    "reason": "the premise",
    "metric": "loss_departure_step",
    "arms": {"arm": ["warmup"]},
    "at_least": 31,
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _write_spec(repo: Path, margins: dict, check: dict = CHECK) -> None:
    spec = {"name": "s", "report": {"margins": margins, "mechanism": [check]}}
    (repo / "spec.yaml").write_text(yaml.safe_dump(spec))


def _commit(repo: Path, message: str, date: str) -> None:
    _git(repo, "add", "-A")
    env_date = f"{date}T12:00:00+00:00"
    subprocess.run(
        ["git", "commit", "-qm", message],
        cwd=repo,
        check=True,
        env={
            "GIT_AUTHOR_DATE": env_date,
            "GIT_COMMITTER_DATE": env_date,
            "PATH": "/usr/bin:/bin",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "HOME": str(repo),
        },
    )


def _add_runs(repo: Path, n: int) -> None:
    folder = repo / "runs" / "s" / f"trial-{n:04d}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text("{}")


@pytest.fixture
def repo(tmp_path):
    """Margins ±3 and the check at ≥ 31 declared on 11-01; the first runs committed on 11-02."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _write_spec(repo, {"steps": 3})
    _commit(repo, "declare", "2026-11-01")
    _add_runs(repo, 0)
    _commit(repo, "runs", "2026-11-02")
    return repo


def _lines(repo: Path, margins: dict, check: dict = CHECK) -> tuple[str, str]:
    return (
        margins_line(str(repo / "spec.yaml"), margins, repo / "runs" / "s", repo=repo),
        mechanism_line(str(repo / "spec.yaml"), [check], repo / "runs" / "s", repo=repo),
    )


def test_a_declaration_in_force_before_the_runs_is_pre_registered(repo):
    margins, mechanism = _lines(repo, {"steps": 3})
    assert "pre-registered" in margins and "2026-11-01" in margins and "2026-11-02" in margins
    assert "pre-registered" in mechanism
    _add_runs(repo, 1)  # more runs later change nothing
    (repo / "spec.yaml").write_text((repo / "spec.yaml").read_text().replace("the premise", "the premise, reworded"))
    _commit(repo, "more runs, reworded", "2026-11-05")
    reworded = dict(CHECK, reason="the premise, reworded")
    assert all("pre-registered" in line for line in _lines(repo, {"steps": 3}, reworded))


def test_a_margin_widened_after_the_runs_is_post_hoc_with_the_commit_that_changed_it(repo):
    _write_spec(repo, {"steps": 6})
    _commit(repo, "widen", "2026-11-03")
    margins, mechanism = _lines(repo, {"steps": 6})
    assert "pre-registered" not in margins and "post hoc" in margins
    assert "2026-11-03" in margins and "in force then: steps ±3" in margins
    assert "pre-registered" in mechanism  # the check did not change


def test_a_mechanism_threshold_moved_after_the_runs_is_post_hoc(repo):
    moved = dict(CHECK, at_least=20)
    _write_spec(repo, {"steps": 3}, moved)
    _commit(repo, "lower the bar", "2026-11-04")
    margins, mechanism = _lines(repo, {"steps": 3}, moved)
    assert "pre-registered" in margins and "post hoc" in mechanism and "2026-11-04" in mechanism


def test_a_declaration_committed_with_its_runs_is_not_pre_registered(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _write_spec(repo, {"steps": 3})
    _add_runs(repo, 0)
    _commit(repo, "spec and runs together", "2026-11-01")
    margins, mechanism = _lines(repo, {"steps": 3})
    assert "post hoc" in margins and "in force then: none" in margins and "post hoc" in mechanism


def test_a_dirty_spec_or_a_shallow_history_cannot_be_dated(repo, tmp_path):
    _write_spec(repo, {"steps": 6})  # edited in the working tree, not committed
    assert all(line.startswith("cannot be dated") or "cannot be dated" in line for line in _lines(repo, {"steps": 6}))
    _git(repo, "checkout", "-q", "--", "spec.yaml")
    _add_runs(repo, 1)
    _commit(repo, "more runs", "2026-11-05")
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    for line in _lines(shallow, {"steps": 3}):
        assert "cannot be dated" in line and "shallow" in line and "pre-registered" not in line


def test_a_sequential_design_declared_after_the_runs_says_its_first_look_was_seen(repo):
    from sweeps.reporting.declared import sequential_line

    design = {"looks": [8, 12, 16], "spending": "obrien_fleming", "alpha": 0.05}
    spec = yaml.safe_load((repo / "spec.yaml").read_text())
    spec["report"]["sequential"] = design
    (repo / "spec.yaml").write_text(yaml.safe_dump(spec))
    _commit(repo, "declare the design after the first look", "2026-11-06")
    line = sequential_line(str(repo / "spec.yaml"), design, repo / "runs" / "s", repo=repo)
    assert line.startswith("looks at 8, 12, 16 pairs per seed set, obrien_fleming spending of α = 0.05")
    assert "post hoc" in line and "2026-11-06" in line and "in force then: none" in line
