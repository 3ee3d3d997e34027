"""`python -m grpo_lab ARGS` = `grpo ARGS`."""

import sys

from .cli import main

if __name__ == "__main__":  # not when a spawned process (the MLflow writer) re-imports the main module
    sys.exit(main())
