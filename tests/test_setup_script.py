"""scripts/bootstrap.sh, the set-up both README commands run: its stamp means "this environment
works". Run here on a copy of the project whose virtual environment is a stand-in (a shell script as
its python), so that no package is installed."""

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

from conftest import ROOT


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    (root / "requirements").mkdir()
    for name in ("pyproject.toml", "scripts/bootstrap.sh", "requirements/lock-cpu.txt"):
        shutil.copy(ROOT / name, root / name)
    return root


def _fake_venv(root: Path, compile_step: str = "exit 0") -> Path:
    """A .venv whose python answers what the script asks; `compile_step` runs for compileall."""
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        echo "$*" >> "{root}/calls.log"
        case "$*" in
          *compileall*) {compile_step} ;;
          *sysconfig*) echo /nonexistent ;;
        esac
        exit 0
        """)
    )
    python.chmod(0o755)
    (bin_dir / "grpo").write_text("#!/bin/bash\n")
    (bin_dir / "grpo").chmod(0o755)
    return python


def _stamp_text(root: Path) -> str:
    digest = subprocess.run(
        "cat pyproject.toml scripts/bootstrap.sh requirements/lock-cpu.txt | sha256sum",
        shell=True,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    return f"{digest} torch==2.13.0\n"


def _bootstrap(root: Path, path: str | None = None):
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    env.pop("GRPO_TORCH_SPEC", None)
    return subprocess.run(
        ["bash", str(root / "scripts" / "bootstrap.sh")], capture_output=True, text=True, env=env, timeout=120
    )


def test_a_stamp_over_an_environment_whose_python_is_gone_is_not_trusted(tmp_path):
    root = _project(tmp_path)
    (root / ".venv" / "bin").mkdir(parents=True)  # the interpreter was removed (a Python upgrade, a cleanup)
    (root / ".venv" / ".grpo-lab-installed").write_text(_stamp_text(root))
    fake_bin = tmp_path / "bin"  # a python3 that cannot make a venv here: the script must fail, not exit 0
    fake_bin.mkdir()
    (fake_bin / "python3").write_text('#!/bin/bash\necho "python3 $*" >&2\nexit 1\n')
    (fake_bin / "python3").chmod(0o755)
    res = _bootstrap(root, f"{fake_bin}:{os.environ['PATH']}")
    assert res.returncode != 0 and "python3 -m venv" in res.stderr
    assert not (root / ".venv" / ".grpo-lab-installed").exists()


def test_an_interrupt_while_compiling_leaves_no_stamp(tmp_path):
    root = _project(tmp_path)
    _fake_venv(root, compile_step="kill -INT $PPID; sleep 1; exit 130")  # Ctrl-C reaches the script and python
    res = _bootstrap(root)
    assert res.returncode == 130 and "interrupted" in res.stderr
    assert not (root / ".venv" / ".grpo-lab-installed").exists()


def test_a_complete_install_says_each_phase_and_writes_the_stamp_last(tmp_path):
    root = _project(tmp_path)
    _fake_venv(root)
    res = _bootstrap(root)
    assert res.returncode == 0, res.stderr
    phases = [line for line in res.stderr.splitlines() if line.startswith("set-up: ")]
    assert [p.split()[1] for p in phases] == ["installing", "installing", "byte-compiling", "ready:"]
    assert (root / ".venv" / ".grpo-lab-installed").read_text() == _stamp_text(root)
    calls = (root / "calls.log").read_text()
    assert _bootstrap(root).returncode == 0 and (root / "calls.log").read_text().count("pip") == calls.count("pip")
