"""When a claim spec's equivalence margins were declared, against when its runs were: a margin is a
pre-registration only if the commit that wrote it predates the runs it judges. Read from git (the
spec file's history, and the commits that added the sweep's committed run folders), so a fresh clone
shows the same; without git history the report says it cannot tell."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

from ..paths import REPO


def _git(*args: str) -> Optional[list[str]]:
    try:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30, cwd=REPO)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.split("\n") if proc.returncode == 0 else None


def margins_commit(spec_path: str) -> Optional[tuple[str, str]]:
    """(short hash, ISO date) of the oldest commit whose change to the spec file added or removed a
    `margins:` line: the declaration. None without git history or where none added it (uncommitted)."""
    lines = _git("log", "--reverse", "--format=%h %cI", "-G", r"^\s*margins:", "--", str(spec_path))
    found = [line.split() for line in lines or [] if line.strip()]
    return (found[0][0], found[0][1]) if found else None


def runs_first_committed(sweep_folder: Path) -> Optional[str]:
    """ISO date of the oldest commit that added a file under the sweep's run folder, or None
    (runs not committed: the CPU testbed's, trained by each `grpo reproduce`)."""
    try:
        relative = Path(sweep_folder).resolve().relative_to(REPO)
    except ValueError:
        return None
    lines = _git("log", "--diff-filter=A", "--format=%cI", "--", str(relative))
    dates = [line.strip() for line in lines or [] if line.strip()]
    return dates[-1] if dates else None


def margins_line(spec_path: str, margins: dict, sweep_folder: Optional[Path]) -> str:
    """The report's line on a spec's margins: their values and whether they were declared before
    the runs ("pre-registered") or after ("post hoc")."""
    values = ", ".join(f"{k} ±{v:g}" for k, v in margins.items())
    declared = margins_commit(spec_path)
    first = runs_first_committed(sweep_folder) if sweep_folder is not None else None
    if declared is None:
        return f"{values} (not committed yet: when they were declared cannot be shown)"
    when = f"declared in commit {declared[0]} ({declared[1][:10]})"
    if first is None:
        return f"{values} ({when}; the runs are not committed, so their order cannot be shown from git)"
    if declared[1] <= first:
        return f"{values} (**pre-registered**: {when}, before the first run folder was committed, {first[:10]})"
    return (f"{values} (**post hoc**: {when}, after the runs, first committed {first[:10]}: not a "
            f"pre-registration)")
