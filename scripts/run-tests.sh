#!/usr/bin/env bash
# Run the test suite in the project's virtual environment (created on first use).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
# two workers (pytest-xdist), each test given to whichever is free: the slow tests train in
# subprocesses and wait on servers, so two at a time keep both cores busy
exec "$root/.venv/bin/python" -m pytest -n 2 --dist worksteal "$@"
