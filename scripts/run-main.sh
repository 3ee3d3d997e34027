#!/usr/bin/env bash
# The main job: `grpo reproduce --quick`, every claim in experiments/ with fewer seeds and steps
# (report under results/local/quick/; the committed results/REPORT.md is never overwritten).
# The tiny base models are pretrained and cached on first use. Extra arguments go to `grpo reproduce`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
exec "$root/.venv/bin/grpo" reproduce --quick "$@"
