"""What a run keeps of itself: checkpoints (checkpoint), where and with what it ran (provenance),
and steps-to-learn and the other summary metrics (run_metrics).
May import: sampling, config, algo, tasks, util."""
