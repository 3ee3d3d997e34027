"""The `grpo` command. Bad input: one line on stderr naming what is wrong, exit code 2."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .errors import RunFailure, UserInputError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="grpo", description="GRPO ablation framework")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser("train", help="train one run")
    train.add_argument("config", nargs="?", help="YAML config (may be partial; defaults otherwise)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key (value parsed as YAML); repeatable")
    train.add_argument("--out", default=None, help="run folder (default results/local/runs/<run name>)")
    train.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")

    pre = sub.add_parser("pretrain", help="build (or find cached) the tiny base model for a task")
    pre.add_argument("--task", default="addition")
    pre.add_argument("--steps", type=int, default=None, help="pretraining steps (default: the task's)")
    pre.add_argument("--cache-dir", default="results/local/cache")
    return parser


def _cmd_train(args) -> int:
    from .config import load_config

    cfg = load_config(args.config, args.overrides)
    run_name = cfg.run_name or cfg.default_run_name()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("results/local/runs") / f"{run_name}-{stamp}"
    if out.exists() and any(out.iterdir()):
        raise UserInputError(f"--out {out}: folder exists and is not empty; choose a new folder")
    from .run import run_training

    logger = None
    if not args.no_mlflow:  # the MLflow run is created only once training has started
        logger = _LazyLogger(dict(tracking_uri=cfg.mlflow_tracking_uri, experiment=cfg.mlflow_experiment,
                                  run_name=run_name, params=cfg.to_dict()))
    summary = run_training(cfg, out, logger=logger, progress=not args.no_progress)
    stl = summary.get("steps_to_learn")
    print(f"done: {out}  reward {summary['baseline_reward']:.3f} -> {summary['final_reward']:.3f}  "
          f"steps_to_learn={stl}  median step {summary['median_step_time_s'] * 1000:.1f} ms  "
          f"wall {summary['wall_time_s']:.1f}s")
    return 0


class _LazyLogger:
    """Creates the MLflow run at the first logged step, i.e. only once training really started."""

    def __init__(self, kwargs: dict):
        self.kwargs, self.inner = kwargs, None

    def _get(self):
        if self.inner is None:
            from sweeps.mlflow_logging import MlflowRunLogger

            self.inner = MlflowRunLogger(**self.kwargs)
        return self.inner

    def log_step(self, metrics: dict) -> None:
        self._get().log_step(metrics)

    def end(self, summary: dict, status: str, run_dir) -> None:
        self._get().end(summary, status, run_dir)


def _cmd_pretrain(args) -> int:
    from .models import ensure_tiny_model
    from .tasks import TASKS

    if args.task not in TASKS:
        raise UserInputError(f"--task: unknown value {args.task!r}; allowed: {', '.join(TASKS)}")
    steps = TASKS[args.task].tiny_pretrain_steps if args.steps is None else args.steps
    if steps < 0:
        raise UserInputError(f"--steps: got {steps}; allowed: an integer ≥ 0")
    print(ensure_tiny_model(args.cache_dir, args.task, steps))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    handlers = {"train": _cmd_train, "pretrain": _cmd_pretrain}
    try:
        return handlers[args.command](args)
    except UserInputError as exc:
        print(f"grpo: error: {exc}", file=sys.stderr)
        return 2
    except RunFailure as exc:
        print(f"grpo: run failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("grpo: interrupted; the run is recorded as killed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
