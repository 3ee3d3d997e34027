"""Where grpo-lab keeps its local state by default: one name per place, used by the config, the
stores and every command's help. All under results/local/ (git-ignored). Imports nothing, so the
command line can read it before torch loads."""

LOCAL = "results/local"
TRACKING_URI = f"sqlite:///{LOCAL}/mlflow.db"  # MLflow's store (embedded: no server)
ARTIFACT_ROOT = f"{LOCAL}/mlartifacts"  # MLflow's artifacts for the embedded store
JOURNAL = f"{LOCAL}/optuna-journal.log"  # Optuna's store for sweeps on one machine
CACHE_DIR = f"{LOCAL}/cache"  # tiny bases pretrained here, measured baselines, benchmark models
RUNS = f"{LOCAL}/runs"  # `grpo train` run folders
SWEEPS = f"{LOCAL}/sweeps"  # sweep trial run folders
MODELS = f"{LOCAL}/models"  # models fetched with `grpo fetch-model`
QUICK = f"{LOCAL}/quick"  # `grpo reproduce --quick` (report, specs, runs)
QUICK_REAL = f"{LOCAL}/quick-real"  # `grpo reproduce --real --quick`
REPRODUCE = f"{LOCAL}/reproduce"  # the full reproduction's specs and runs
REPRODUCE_JOURNALS = f"{LOCAL}/journals"  # one Optuna journal per `grpo reproduce` invocation (the run folders decide)
