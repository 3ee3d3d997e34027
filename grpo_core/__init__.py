"""grpo-lab's library. Importing it pins the CPU math paths (cpu_math.py) when torch is not loaded
yet: to the mode the `grpo` command chose for this process tree, else the default, reproducible."""

import os as _os

from grpo_core.util import cpu_math as _cpu_math

_cpu_math.pin(_os.environ.get(_cpu_math.ENV_MODE, _cpu_math.DEFAULT))
