#!/usr/bin/env bash
# Create .venv and install grpo-lab into it, idempotently.
# torch is installed first, pinned to the CPU wheel on machines without a GPU, so that the
# package's own `torch` requirement is already satisfied and never resolves to a CUDA build.
# The stamp file means "this environment works": it is checked (the interpreter runs and imports
# grpo-lab) before it is trusted, removed before anything changes, and written last, on success.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
torch_spec="${GRPO_TORCH_SPEC:-torch==2.13.0}"
stamp="$venv/.grpo-lab-installed"
lock="$root/requirements/lock-cpu.txt"  # exact versions of everything but torch (scripts/lock.py)
want="$(cat "$root/pyproject.toml" "$root/scripts/bootstrap.sh" "$lock" | sha256sum | cut -d' ' -f1) $torch_spec"

say() { echo "set-up: $*" >&2; }
works() {  # the interpreter runs, grpo-lab and torch are importable, the command exists
  [ -x "$venv/bin/grpo" ] && "$venv/bin/python" -c \
    'import importlib.util, grpo_lab; assert importlib.util.find_spec("torch")' >/dev/null 2>&1
}
interrupted() { say "interrupted; nothing is marked installed: run it again to finish"; exit 130; }
trap interrupted INT TERM

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && works; then
  exit 0
fi
rm -f "$stamp"
if ! "$venv/bin/python" -c '' >/dev/null 2>&1; then  # none yet, or its interpreter is gone
  say "creating the virtual environment $venv"
  python3 -m venv --clear "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# --no-compile, then byte-compile on every core: pip compiles one file at a time (half of a 3-minute
# install on 2 cores). The compiled files matter: with PYTHONDONTWRITEBYTECODE set, nothing would
# cache them later and every `grpo` process would pay ~7 s more to start.
say "installing $torch_spec, the CPU wheel (about 1 minute on a fresh machine)"
"${pip[@]}" install --no-compile "$torch_spec" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# the project with exactly the locked versions of everything it needs: the lock is the resolution, so
# no resolver pass (--no-deps: 7% faster from an empty package cache, measured alternating); `pip check`
# then fails the install if the lock lacks a dependency (tests/test_lock.py follows the extras, which it does not)
say "installing grpo-lab and the $(grep -c '==' "$lock") packages of requirements/lock-cpu.txt (about 1 minute)"
"${pip[@]}" install --no-compile --no-deps -r "$lock" -e "$root[dev,bench]" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
if ! broken="$("${pip[@]}" check)"; then echo "$broken" >&2; exit 1; fi
say "byte-compiling the installed packages, so that each command starts faster (about 30 s)"
compiled=0
"$venv/bin/python" -m compileall -q -j 0 "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  "$root/grpo_core" "$root/grpo_lab" "$root/sweeps" "$root/benchmarks" >/dev/null 2>&1 || compiled=$?
if [ "$compiled" -ge 128 ]; then  # ended by a signal (Ctrl-C reaches it too), whichever of this and the trap comes first
  interrupted
elif [ "$compiled" -gt 1 ]; then  # 1: some package ships a file that does not compile (harmless); more: stopped
  say "byte-compiling stopped (exit $compiled); nothing is marked installed"; exit 1
fi
if ! works; then say "the environment does not import grpo-lab after the install"; exit 1; fi
echo "$want" > "$stamp.tmp" && mv "$stamp.tmp" "$stamp"
say "ready: $venv"
