"""`python -m grpo_lab ARGS` = `grpo ARGS`."""

import sys

from .cli import main

sys.exit(main())
