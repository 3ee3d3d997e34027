#!/usr/bin/env bash
# The main job on the embedded defaults: one GRPO run of the tiny model on two-number addition
# (the tiny base model is pretrained and cached on first use). Extra arguments go to `grpo train`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/bootstrap.sh"
cd "$root"
exec "$root/.venv/bin/grpo" train "$@"
