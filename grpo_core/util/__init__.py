"""The bottom wing: what every other part of grpo_core may use. One-line errors and the masking of
secrets (errors), atomic writes and folder checks (files), strict YAML (yaml_files), default paths
(defaults), the name registries (registry), the CPU math pins (cpu_math), the data-parallel
process helpers (distributed) and child processes that end with their parent (parent_death).
Imports nothing from grpo_core."""
