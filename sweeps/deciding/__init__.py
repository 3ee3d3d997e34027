"""Deciding verdicts from numbers: runs as plain data (runs), the statistics
(censored medians, signed-rank and rank-sum tests, Hodges-Lehmann intervals, Holm), one seed set's
verdicts (verdicts), the two-set replication rule (replication), what a test could detect (power),
the placebo and positive-control gates (gates) and the peer check against TRL's runs (peer).

Pure: it reads summaries and metrics and returns verdicts and numbers, so it works on any runs,
TRL's included, and on hand-made numbers. It imports neither Optuna, MLflow, torch, the trainer nor
the sweep driver (`lint-imports`, pyproject.toml); only the ground (sweeps.spec, sweeps.report_spec,
sweeps.paths) and grpo_core's run-folder readers."""
