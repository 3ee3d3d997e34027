#!/usr/bin/env bash
# Create .venv and install grpo-lab into it, idempotently.
# torch is installed first, pinned to the CPU wheel on machines without a GPU, so that the
# package's own `torch` requirement is already satisfied and never resolves to a CUDA build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
torch_spec="${GRPO_TORCH_SPEC:-torch==2.13.0}"
stamp="$venv/.grpo-lab-installed"
want="$(cat "$root/pyproject.toml" "$root/scripts/bootstrap.sh" | sha256sum | cut -d' ' -f1) $torch_spec"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install "$torch_spec" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"${pip[@]}" install -e "$root[dev,bench]" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
echo "$want" > "$stamp"
