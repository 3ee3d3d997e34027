"""When a claim spec's declarations (its equivalence margins, its mechanism checks) were made,
against when its runs were. A declaration is dated by what it says: it is pre-registered only if the
value in force in the commit before its runs' first committed folder equals the value the report
uses. Read from git (the spec file's history, followed through renames, and the commits that added
the sweep's run folders), so a fresh clone shows the same. Where git cannot tell (no history, a
shallow clone, a spec with uncommitted changes) the declaration "cannot be dated", never
pre-registered."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from ..paths import REPO

# the keys of a mechanism check that say what it checks; its prose (what, reason) may be reworded
MECHANISM_WORDS = ("what", "reason")


def _git(repo: Path, *args: str) -> Optional[list[str]]:
    try:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30, cwd=repo)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.split("\n") if proc.returncode == 0 else None


def margins_of(spec: Optional[dict]) -> Optional[dict]:
    """A spec's declared equivalence margins (numbers as floats), or None where it declares none."""
    margins = ((spec or {}).get("report") or {}).get("margins")
    return {k: float(v) for k, v in margins.items()} if isinstance(margins, dict) and margins else None


def mechanism_of(spec: Optional[dict]) -> Optional[list]:
    """A spec's mechanism checks without their prose (metric, arms, thresholds...), or None."""
    checks = ((spec or {}).get("report") or {}).get("mechanism")
    if not isinstance(checks, list) or not checks:
        return None
    return [{k: v for k, v in c.items() if k not in MECHANISM_WORDS} if isinstance(c, dict) else c for c in checks]


def _spec_history(repo: Path, relative: str) -> Optional[list[tuple[str, str, str]]]:
    """(hash, ISO date, path then) of every commit that changed the spec, oldest first, followed
    through renames; None without git."""
    lines = _git(repo, "log", "--follow", "--name-only", "--format=@%H %cI", "--", relative)
    if lines is None:
        return None
    out, head = [], None
    for line in lines:
        if line.startswith("@"):
            head = line[1:].split()
        elif line.strip() and head:
            out.append((head[0], head[1], line.strip()))
            head = None
    return out[::-1]


# What git says of a commit does not change: read once per HEAD (a report dates two or three
# declarations per spec, and about forty specs), not once per declaration.
def _head(repo: Path) -> Optional[str]:
    lines = _git(repo, "rev-parse", "HEAD")
    return lines[0].strip() if lines else None


@functools.lru_cache(maxsize=None)
def _spec_versions(repo: str, relative: str, head: Optional[str]) -> tuple:
    """(hash, ISO date, the spec as a mapping or None) per commit that changed the spec, oldest first."""
    out = []
    for commit, date, path in _spec_history(Path(repo), relative) or []:
        text = _git(Path(repo), "show", f"{commit}:{path}")
        try:
            spec = yaml.safe_load("\n".join(text)) if text is not None else None
        except yaml.YAMLError:
            spec = None
        out.append((commit, date, spec if isinstance(spec, dict) else None))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _commit_order(repo: str, head: Optional[str]) -> dict:
    """Each commit of HEAD's history by its place in it, oldest 0."""
    return {h: i for i, h in enumerate(reversed([x for x in _git(Path(repo), "rev-list", "HEAD") or [] if x]))}


@functools.lru_cache(maxsize=None)
def _first_run_commit(repo: str, folder: str, head: Optional[str]) -> Optional[tuple[str, str]]:
    """(hash, ISO date) of the oldest commit that added a file under the sweep's run folder, or None
    (runs not committed: the CPU testbed's, trained by each `grpo reproduce`)."""
    try:
        relative = Path(folder).resolve().relative_to(Path(repo).resolve())
    except ValueError:
        return None
    lines = _git(Path(repo), "log", "--diff-filter=A", "--format=%H %cI", "--", str(relative))
    found = [line.split() for line in lines or [] if line.strip()]
    return (found[-1][0], found[-1][1]) if found else None


def _why_undatable(repo: Path, relative: str) -> Optional[str]:
    """Why git cannot date this spec's declarations, or None where it can."""
    if _git(repo, "rev-parse", "--git-dir") is None:
        return "no git history"
    if (_git(repo, "rev-parse", "--is-shallow-repository") or [""])[0].strip() == "true":
        return "the git history is shallow: the commits before the runs may be missing"
    status = _git(repo, "status", "--porcelain", "--", relative)
    if status is None or any(line.strip() for line in status):
        return "the spec has uncommitted changes"
    return None


def dated(
    spec_path: str, read: Callable[[Optional[dict]], Any], used: Any, sweep_folder: Optional[Path], repo: Path = REPO
) -> str:
    """How the declaration `read` picks out of a spec was made, against the runs: "pre-registered",
    "post hoc" (with the commit that changed it after the runs), "cannot be dated", or not yet
    committed. `used` is the value the report uses (read from the loaded spec)."""
    try:
        relative = str(Path(spec_path).resolve().relative_to(Path(repo).resolve()))
    except ValueError:
        return "cannot be dated: the spec is outside the repository"
    why = _why_undatable(repo, relative)
    if why:
        return f"cannot be dated: {why}"
    head = _head(repo)
    # (hash, date, value) per commit that changed the file
    versions = [(commit, date, read(spec)) for commit, date, spec in _spec_versions(str(repo), relative, head)]
    if not versions or versions[-1][2] != used:
        return "not committed yet: when it was declared cannot be shown"
    # the oldest commit since which the value has been the one used
    since = len(versions) - 1
    while since > 0 and versions[since - 1][2] == used:
        since -= 1
    when = f"commit {versions[since][0][:7]} ({versions[since][1][:10]})"
    first = _first_run_commit(str(repo), str(sweep_folder), head) if sweep_folder is not None else None
    if first is None:
        return f"declared in {when}; the runs are not committed, so their order cannot be shown from git"
    order = _commit_order(str(repo), head)
    before = [v for v in versions if order.get(v[0], -1) < order.get(first[0], -1)]
    in_force = before[-1][2] if before else None
    runs = f"the first run folder was committed in {first[0][:7]} ({first[1][:10]})"
    if before and in_force == used:
        start = len(before) - 1  # the oldest commit of the stretch, before the runs, that held this value
        while start > 0 and versions[start - 1][2] == used:
            start -= 1
        return (
            f"**pre-registered**: in force since commit {versions[start][0][:7]} ({versions[start][1][:10]}), "
            f"before {runs}"
        )
    return (
        f"**post hoc**: set in {when}, not before the runs ({runs}; in force then: "
        f"{_show(in_force)}): not a pre-registration"
    )


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):  # margins
        return ", ".join(f"{k} ±{v:g}" for k, v in value.items())
    return "a different declaration"


def margins_line(spec_path: str, margins: dict, sweep_folder: Optional[Path], repo: Path = REPO) -> str:
    """The report's line on a spec's margins: their values, dated (see `dated`)."""
    used = {k: float(v) for k, v in margins.items()}
    values = ", ".join(f"{k} ±{v:g}" for k, v in used.items())
    return f"{values} ({dated(spec_path, margins_of, used, sweep_folder, repo)})"


def mechanism_line(spec_path: str, checks: list, sweep_folder: Optional[Path], repo: Path = REPO) -> str:
    """The report's line dating a spec's mechanism checks (metric, arms and thresholds; their prose
    may be reworded)."""
    return dated(spec_path, mechanism_of, mechanism_of({"report": {"mechanism": checks}}), sweep_folder, repo)


def sequential_of(spec: Optional[dict]) -> Optional[dict]:
    """A spec's declared sequential design (looks, spending, α), or None."""
    design = ((spec or {}).get("report") or {}).get("sequential")
    return dict(design) if isinstance(design, dict) else None


def sequential_line(spec_path: str, design: dict, sweep_folder: Optional[Path], repo: Path = REPO) -> str:
    """The report's line on a spec's sequential design: its looks and spending, dated (see `dated`);
    post hoc here means the committed runs are its first look, read after they were seen."""
    looks = ", ".join(map(str, design["looks"]))
    when = dated(spec_path, sequential_of, dict(design), sweep_folder, repo)
    return (
        f"looks at {looks} pairs per seed set, {design.get('spending', 'obrien_fleming')} spending of α = "
        f"{design.get('alpha', 0.05):g} ({when})"
    )
