"""`python -m grpo_core.cli ARGS` runs `python -m grpo_lab ARGS` (the `grpo` command).

Kept for `../shared/gpu/on-device.sh`, whose `grpo` shell function calls this module and which
the project cannot edit. It imports nothing: the command line lives above the library, in
`grpo_lab/`, and `grpo_core` never imports it (tests/test_layers.py)."""

import os
import sys

if __name__ == "__main__":
    os.execv(sys.executable, [sys.executable, "-m", "grpo_lab", *sys.argv[1:]])
