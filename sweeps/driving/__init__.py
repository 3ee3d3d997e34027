"""Running sweeps: a spec's Optuna study (driver), its storage (journal, SQLite, PostgreSQL) and its
repair, which worker trains which grid point (claims), one trial's run (trial_run), a search's
sampler, pruner and objective (search), finished run folders taken as done points (adopt), a
stopped run's checkpoint its point goes on from (resume), the trials of dead workers (recovery),
the worker processes and the replacement of one killed by a signal (worker_pool),
the progress line, the trials table and parameter importance (trials), the sweep's MLflow view
(ui_view) and a run's reward-curve image (plots).

Imports the ground (sweeps.spec, sweeps.report_spec, sweeps.paths) and grpo_core; never the
verdicts (sweeps.deciding) or the pages (sweeps.reporting)."""
