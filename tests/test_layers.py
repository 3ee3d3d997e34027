"""The layering is one-way (README: How the code is laid out): grpo_lab (the command) >
benchmarks > sweeps > grpo_core (the library). `lint-imports` checks the contract in
pyproject.toml over every import, function-level ones included."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("grpo_lab", "benchmarks", "sweeps", "grpo_core")
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_imports_run_one_way():
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 kept, 0 broken" in proc.stdout  # the packages, and grpo_core's wings


def test_a_lazy_upward_import_breaks_the_contract(tmp_path):
    """The check is not vacuous: a copy of the tree with one function-level import of the sweep
    driver inside the trainer is refused."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("tiny_bases", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    trainer = tmp_path / "grpo_core" / "trainer.py"
    trainer.write_text(trainer.read_text() + "\n\ndef _upward():\n    from sweeps import driver  # noqa\n")
    proc = _lint(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "grpo_core.trainer -> sweeps.driver" in proc.stdout


def test_an_upward_import_between_wings_breaks_the_contract(tmp_path):
    """The wings' order is enforced: a copy of the library whose util wing imports the trainer is refused."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("tiny_bases", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    files = tmp_path / "grpo_core" / "util" / "files.py"
    files.write_text(files.read_text() + "\n\ndef _upward():\n    from grpo_core import trainer  # noqa\n")
    proc = _lint(tmp_path)
    assert proc.returncode == 1 and "1 kept, 1 broken" in proc.stdout, proc.stdout[-3000:]
    assert "grpo_core.util.files -> grpo_core.trainer" in proc.stdout


def test_no_import_cycle_inside_grpo_core():  # the checkpoint <-> trainer cycle: GenerationBatch moved to batch.py
    """No module of the library imports one that imports it back, at module level or inside a
    function (a function-level import hides a cycle from import-linter's layers, not from a reader)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "grpo_core"
    paths = {".".join(p.relative_to(root).with_suffix("").parts): p for p in root.rglob("*.py")
             if p.name != "__init__.py"}
    graph = {}
    for name, path in paths.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_core."):
                module = node.module[len("grpo_core."):]
                deps |= {module} | {f"{module}.{a.name}" for a in node.names}
        graph[name] = (deps & set(paths)) - {name}
    def reaches(start, target, seen):
        return any(d == target or (d not in seen and not seen.add(d) and reaches(d, target, seen))
                   for d in graph[start])

    cycles = sorted(m for m in graph if reaches(m, m, set()))
    assert not cycles, f"modules on an import cycle: {cycles}"
