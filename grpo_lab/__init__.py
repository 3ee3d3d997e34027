"""The `grpo` command: the top layer, above the library (`grpo_core`), the sweeps (`sweeps`) and
the benchmarks (`benchmarks`). Nothing below imports it (tests/test_layers.py)."""
