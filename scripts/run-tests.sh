#!/usr/bin/env bash
# Run the test suite in the project's virtual environment (created on first use).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
# two workers (pytest-xdist), each test given to whichever is free, each with one math thread
# (tests/conftest.py): faster than one process on 2 cores, as measured in README.md ("Tests");
# `-n 0` after this script's name runs it in one process
exec "$root/.venv/bin/python" -m pytest -n 2 --dist worksteal "$@"
