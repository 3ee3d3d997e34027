"""grpo-lab: `import grpo_lab` for the Python entry points (grpo_lab/api.py: config, train, read_run,
sweep, trials, verdicts, report), the `grpo` command for the shell (grpo_lab/cli.py, built on them). The top
layer, above the library (`grpo_core`), the sweeps (`sweeps`) and the benchmarks (`benchmarks`);
nothing below imports it (tests/test_layers.py)."""

__all__ = ["GRPOConfig", "Run", "Sweep", "config", "read_run", "report", "sweep", "train", "trials", "verdicts"]


def __getattr__(name: str):
    # loaded on first use: `grpo` (python -m grpo_lab) sets the CPU math before anything loads torch
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")
