"""The layering is one-way (README: How the code is laid out): grpo_lab (the command) >
benchmarks (measurements) > grpo_peer (the TRL peer) > sweeps > grpo_core (the library). `lint-imports` checks the contract in
pyproject.toml over every import, function-level ones included."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("grpo_lab", "benchmarks", "grpo_peer", "sweeps", "grpo_core")
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_imports_run_one_way():
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # the packages, grpo_core's wings, sweeps' wings, pure verdicts, no science resting on a measurement
    assert "5 kept, 0 broken" in proc.stdout


def test_a_lazy_upward_import_breaks_the_contract(tmp_path):
    """The check is not vacuous: a copy of the tree with one function-level import of the sweep
    driver inside the trainer is refused."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("tiny_bases", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    trainer = tmp_path / "grpo_core" / "trainer.py"
    trainer.write_text(trainer.read_text() + "\n\ndef _upward():\n    from sweeps.driving import driver  # noqa\n")
    proc = _lint(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "grpo_core.trainer -> sweeps.driving.driver" in proc.stdout


def test_an_upward_import_between_wings_breaks_the_contract(tmp_path):
    """The wings' order is enforced: a copy of the library whose util wing imports the trainer is refused."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("tiny_bases", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    files = tmp_path / "grpo_core" / "util" / "files.py"
    files.write_text(files.read_text() + "\n\ndef _upward():\n    from grpo_core import trainer  # noqa\n")
    proc = _lint(tmp_path)
    # broken twice: the wings' order, and the verdicts (which read metrics through util.files) reach the trainer
    assert proc.returncode == 1 and "3 kept, 2 broken" in proc.stdout, proc.stdout[-3000:]
    assert "grpo_core.util.files -> grpo_core.trainer" in proc.stdout


def _copy_tree(tmp_path: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("tiny_bases", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code + "\n")


def test_the_verdicts_may_not_reach_optuna_even_through_the_ground(tmp_path):
    """The pure-verdicts contract follows indirect imports: a verdicts module that imports the sweep
    spec at run time (not for a type) reaches torch through the config it builds, and is refused;
    so is the statistics module importing Optuna, and the driver importing the verdicts."""
    _copy_tree(tmp_path)
    _append(tmp_path / "sweeps" / "deciding" / "gates.py", "def _spec():\n    from ..spec import load_spec  # noqa")
    _append(tmp_path / "sweeps" / "deciding" / "statistics.py", "def _study():\n    import optuna  # noqa")
    _append(tmp_path / "sweeps" / "driving" / "claims.py", "def _judge():\n    from ..deciding import verdicts  # noqa")
    proc = _lint(tmp_path)
    assert proc.returncode == 1 and "3 kept, 2 broken" in proc.stdout, proc.stdout[-3000:]
    assert "sweeps.deciding.gates -> sweeps.spec" in proc.stdout  # on its way to torch
    assert "sweeps.deciding.statistics -> optuna" in proc.stdout
    assert "sweeps.driving.claims -> sweeps.deciding.verdicts" in proc.stdout


def test_the_report_and_the_peer_may_not_rest_on_a_measurement(tmp_path):
    """benchmarks/ holds measurements only: the peer importing the bench's module, or the report's
    peer section importing a benchmark, is refused."""
    _copy_tree(tmp_path)
    _append(tmp_path / "grpo_peer" / "check.py", "def _bench():\n    from benchmarks import trl_bench  # noqa")
    _append(tmp_path / "sweeps" / "deciding" / "peer.py", "def _bench():\n    from benchmarks import flop_rate  # noqa")
    proc = _lint(tmp_path)
    assert proc.returncode == 1 and "broken" in proc.stdout, proc.stdout[-3000:]
    assert "grpo_peer.check -> benchmarks.trl_bench" in proc.stdout
    assert "sweeps.deciding.peer -> benchmarks.flop_rate" in proc.stdout


def test_no_module_but_the_trainer_is_over_500_lines():
    """A reader finds a job by its file name and reads the file in one sitting; the trainer says in
    its opening comment why it stays one file."""
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in ("grpo_core", "sweeps", "grpo_lab", "grpo_peer")
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert set(long) <= {"grpo_core/trainer.py"}, long


def test_the_verdicts_load_no_torch_optuna_or_mlflow():
    """At run time too: importing every module of the verdict wing loads none of the heavy
    libraries (the statistics run on any numbers, in any Python with numpy and scipy)."""
    code = (
        "import importlib, pkgutil, sys, sweeps.deciding as d\n"
        "names = [m.name for m in pkgutil.iter_modules(d.__path__)]\n"
        "[importlib.import_module('sweeps.deciding.' + n) for n in names]\n"
        "print(len(names), sorted({k.split('.')[0] for k in sys.modules} & {'torch', 'optuna', 'mlflow', 'transformers'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    modules = len(list((ROOT / "sweeps" / "deciding").glob("*.py"))) - 1  # all but __init__.py
    assert out.split() == [str(modules), "[]"], out  # every module imported, none of the four libraries


def test_the_power_command_keeps_its_name_before_the_wings():
    """`python -m sweeps.power` (its name in committed reports and docs) runs the power command,
    which now lives in sweeps/deciding/power.py; imported by that name, it is the same module."""
    proc = subprocess.run([sys.executable, "-m", "sweeps.power", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "--treatment" in proc.stdout, proc.stderr[-2000:]
    code = "import sweeps.power as old, sweeps.deciding.power as new; print(old is new)"
    assert (
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True).stdout.strip() == "True"
    )


def test_no_import_cycle_inside_grpo_core():  # the checkpoint <-> trainer cycle: GenerationBatch moved to batch.py
    """No module of the library imports one that imports it back, at module level or inside a
    function (a function-level import hides a cycle from import-linter's layers, not from a reader)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "grpo_core"
    paths = {
        ".".join(p.relative_to(root).with_suffix("").parts): p for p in root.rglob("*.py") if p.name != "__init__.py"
    }
    graph = {}
    for name, path in paths.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_core."):
                module = node.module[len("grpo_core.") :]
                deps |= {module} | {f"{module}.{a.name}" for a in node.names}
        graph[name] = (deps & set(paths)) - {name}

    def reaches(start, target, seen):
        return any(
            d == target or (d not in seen and not seen.add(d) and reaches(d, target, seen)) for d in graph[start]
        )

    cycles = sorted(m for m in graph if reaches(m, m, set()))
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_sweeps_is_three_wings_over_a_small_ground():
    """sweeps/ holds its wings' packages and four ground modules (the spec, its report section, its
    named arms, the paths); no module over 500 lines (a reader finds a job by its wing, and each
    file stays readable)."""
    sweeps = ROOT / "sweeps"
    assert sorted(p.name for p in sweeps.iterdir() if p.is_dir() and (p / "__init__.py").is_file()) == [
        "deciding",
        "driving",
        "reporting",
    ]
    assert sorted(p.stem for p in sweeps.glob("*.py") if p.name != "__init__.py") == [
        "arms",
        "paths",
        "report_spec",
        "spec",
    ]
    long = {str(p.relative_to(ROOT)): n for p in sweeps.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}
