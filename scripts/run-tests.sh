#!/usr/bin/env bash
# Run the test suite in the project's virtual environment (created on first use).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
