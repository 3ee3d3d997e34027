"""Write requirements/lock-cpu.txt: the exact version of every package the project's .venv holds
(pip freeze), but torch, which scripts/bootstrap.sh installs first (torch==2.13.0, the CPU wheel)
and the project itself. scripts/bootstrap.sh installs exactly these; tests/test_lock.py checks the
installed versions against the file.

    .venv/bin/python -m pip install 'newdep>=1.2'   # after adding or raising a dependency in pyproject.toml
    .venv/bin/python scripts/lock.py

bootstrap.sh installs the lock with --no-deps (the lock is the resolution), so a dependency that is
not in it fails the install's `pip check` until it is locked.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock-cpu.txt"
NOT_LOCKED = ("torch",)  # installed before the lock, pinned in scripts/bootstrap.sh (the CPU wheel)


def main() -> int:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    pins = sorted(
        (line for line in frozen if "==" in line and line.split("==")[0].lower() not in NOT_LOCKED), key=str.lower
    )
    LOCK.parent.mkdir(exist_ok=True)
    LOCK.write_text(
        "# Exact versions of every package grpo-lab's .venv holds on a CPU machine, torch aside (the CPU\n"
        "# wheel torch==2.13.0 is installed first by scripts/bootstrap.sh). Written by scripts/lock.py;\n"
        "# results/REPORT.md was made with these versions.\n" + "\n".join(pins) + "\n"
    )
    print(f"wrote {len(pins)} pins to {LOCK}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
