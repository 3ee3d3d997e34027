"""The habits of the field's Python projects, checked where a newcomer's change is checked: ruff's
linter and its formatter over the repository, and mypy over the library and the sweeps, each with the
settings of pyproject.toml (what each holds, and why a rule is off, is written there). The same three
run before a commit where pre-commit is installed (.pre-commit-config.yaml)."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize(
    "command",
    [("ruff", "check", "."), ("ruff", "format", "--check", "."), ("mypy",)],
    ids=["ruff check", "ruff format --check", "mypy"],
)
def test_the_code_passes_its_linter_formatter_and_type_checker(command):
    done = _run(*command)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_the_checks_are_not_vacuous(tmp_path):
    """Each tool refuses what it is there to refuse: an unused import, a file its formatter would
    change, a call with a wrong keyword."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x: int) -> int:\n    return x\n\n\nf(y=1)\nz = [1,2]\n")
    assert "F401" in _run("ruff", "check", "--no-cache", str(bad)).stdout
    assert _run("ruff", "format", "--check", "--no-cache", str(bad)).returncode == 1
    typed = _run("mypy", "--no-incremental", "--config-file", str(ROOT / "pyproject.toml"), str(bad))
    assert 'Unexpected keyword argument "y"' in typed.stdout, typed.stdout


def test_pre_commit_runs_the_same_three():
    hooks = [
        h for repo in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"] for h in repo["hooks"]
    ]
    entries = " ".join(h["entry"] for h in hooks)
    assert "ruff check" in entries and "ruff format" in entries and "mypy" in entries and "lint-imports" in entries
