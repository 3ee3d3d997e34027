"""Where `grpo reproduce` finds its specs and puts the real-model runs. Imports nothing heavy, so
the command line can read it before torch loads (to set the CPU math the specs ask for)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"  # one claim spec per file
REAL_EXPERIMENTS = EXPERIMENTS / "real"  # the real-model claims (SmolLM2-135M-Instruct, a GPU)
REAL_RESULTS = Path("results/real")  # their run folders (config, metrics, summary) are committed here
REAL_CPU_EXPERIMENTS = REAL_EXPERIMENTS / "cpu"  # the real-model claims on a CPU (`grpo reproduce --real-cpu`)
REAL_CPU_RESULTS = REAL_RESULTS / "cpu"  # and their committed run folders


def experiments_dir(experiments: Optional[str], real: bool, real_cpu: bool = False) -> Path:
    """The spec folder of one `grpo reproduce` invocation."""
    if experiments:
        return Path(experiments)
    return REAL_CPU_EXPERIMENTS if real_cpu else REAL_EXPERIMENTS if real else EXPERIMENTS
