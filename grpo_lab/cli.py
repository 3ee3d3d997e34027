"""The `grpo` command. Bad input: one line on stderr naming what is wrong, exit code 2."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from grpo_core.util import defaults
from grpo_core.util.distributed import is_main_process

from .parser import build_parser
from grpo_core.util.errors import (
    PeerDied,
    RecordIncomplete,
    RunFailure,
    Terminated,
    UserInputError,
    handle_sigterm,
    mask_secrets,
    remember_secrets,
)


def _cmd_train(args) -> int:
    from grpo_core.config.loading import load_config

    cfg = load_config(args.config, args.overrides, inputs=False)  # grpo_lab.train checks the inputs
    from .api import default_run_folder

    out = Path(args.out) if args.out else default_run_folder(cfg)  # a resumed run goes on in its own folder
    resume_dir = Path(cfg.resume_from_checkpoint).parent if cfg.resume_from_checkpoint else None
    resuming_in_place = resume_dir is not None and out.resolve() == resume_dir.resolve()
    if args.num_processes != 1:
        return _launch_processes(args, cfg, out, resuming_in_place)
    if not is_main_process():  # a data-parallel run's other processes: no output of their own
        from grpo_core.util.distributed import leave, shut_down
        from grpo_core.run import run_training

        try:
            run_training(cfg, out, progress=False)
        except BaseException:  # process 0 (or, were it the one that died, the launcher) says what happened
            leave(1)
        shut_down()
        return 0
    from .api import train

    from grpo_core.record.provenance import usable_cpus

    cpus = usable_cpus()
    if cfg.num_threads > cpus:  # allowed (a run recorded on a larger machine is reproduced with its threads)
        print(
            f"grpo: note: num_threads {cfg.num_threads} is more than the {cpus} CPU(s) this process may use: "
            f"the same numbers, more slowly",
            file=sys.stderr,
        )
    summary = train(cfg, out, mlflow=not args.no_mlflow, progress=not args.no_progress).summary
    if 2 * cfg.stl_window > cfg.max_steps:  # a short run trains; it says once why it has no steps_to_learn
        print(f"grpo: note: steps_to_learn {summary.get('steps_to_learn_reason', '')}", file=sys.stderr)
    stl = summary.get("steps_to_learn")
    print(
        f"done: {out}  reward {summary['baseline_reward']:.3f} -> {summary['final_reward']:.3f}  "
        f"steps_to_learn={'not learned' if stl is None else stl}  median step {summary['median_step_time_s'] * 1000:.1f} ms  "
        f"wall {summary['wall_time_s']:.1f}s"
    )
    from grpo_core.util.distributed import shut_down

    shut_down()
    return 0


def _launch_processes(args, cfg, out: Path, resuming_in_place: bool) -> int:
    """`grpo train --num-processes N`: check what can be checked here (nothing is written), then
    run this same command on N local processes, all with the same run folder."""

    from grpo_core.util.distributed import launch_local, world_size

    n = args.num_processes
    if n < 1 or world_size() > 1:
        raise UserInputError(
            f"--num-processes: got {n}{' inside a launched process' if n >= 1 else ''}; "
            f"allowed: an integer ≥ 1, given to a plain `grpo train`"
        )
    from grpo_core.config.validation import batch_split_problem, check_inputs

    check_inputs(cfg)
    if (problem := batch_split_problem(cfg, n)) is not None:
        raise UserInputError(f"--num-processes: {n} processes cannot share the batch: {problem}")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not resuming_in_place)):
        raise UserInputError(
            f"--out {out}: {'is a file' if not out.is_dir() else 'folder exists and is not empty'}; "
            f"allowed: a new or empty folder"
        )
    child = [
        "train",
        *([args.config] if args.config else []),
        *[a for o in args.overrides for a in ("--set", o)],
        "--out",
        str(out),
        *(["--no-mlflow"] if args.no_mlflow else []),
        *(["--no-progress"] if args.no_progress else []),
    ]
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n)))  # the cores, shared
    from grpo_core.util.distributed import MainProcessDied

    try:
        return launch_local(n, ["-m", "grpo_lab", *child])
    except MainProcessDied as exc:  # process 0 records the run; it died, so the launcher does, as `grpo recover` would
        reason = f"{exc}; the run stopped"
        print(
            f"grpo: run killed: {reason}; {_record_killed(cfg, out, reason, mlflow=not args.no_mlflow)}",
            file=sys.stderr,
        )
        return 1


def _record_killed(cfg, out: Path, reason: str, mlflow: bool) -> str:
    """Record a run whose process 0 died as killed, with `reason`: its summary.json, and its MLflow
    run (from the steps in its folder). Returns where it is recorded."""
    from grpo_core.run import RUN_MARKER, mark_killed

    marker = out / RUN_MARKER
    if mlflow and marker.is_file():
        from grpo_core.mlflow_store import make_client
        from grpo_core.mlflow_recovery import backfill_and_end

        backfill_and_end(make_client(cfg.mlflow_tracking_uri), marker.read_text().strip(), out, reason)
        return f"recorded as killed in {out} and in MLflow"
    note = mark_killed(out, reason)
    return f"recorded as killed in {out}" if note is None else f"not recorded: {note}"


def _cmd_pretrain(args) -> int:
    from grpo_core.tasks.models import resolve_model_path
    from grpo_core.tasks.catalog import TASKS

    if args.task not in TASKS:
        raise UserInputError(f"--task: unknown value {args.task!r}; allowed: {', '.join(TASKS)}")
    steps = TASKS[args.task].tiny_pretrain_steps if args.steps is None else args.steps
    if steps < 0:
        raise UserInputError(f"--steps: got {steps}; allowed: an integer ≥ 0")
    print(resolve_model_path("tiny", args.cache_dir, args.task, steps))
    return 0


def _cmd_sweep(args) -> int:
    if args.until_decided:
        if args.storage or args.stop_after:
            raise UserInputError(
                "--until-decided: beside --storage or --stop-after; allowed: neither (each look has a journal "
                "of its own, and a look stopped midway goes on from its run folders)"
            )
        from sweeps.reporting.until_decided import run_until_decided

        return run_until_decided(
            args.spec, workers=args.workers, tracking_uri=args.tracking_uri, out_root=args.out_root
        )
    from sweeps.driving.driver import run_sweep

    return run_sweep(
        args.spec,
        workers=args.workers,
        storage_url=args.storage,
        tracking_uri=args.tracking_uri,
        out_root=args.out_root,
        heartbeat_interval=args.heartbeat_interval,
        stop_after=args.stop_after,
    )


def _cmd_trials(args) -> int:
    from sweeps.driving.trials import list_trials

    return list_trials(args.spec, args.storage, evaluator=args.importance)


def _cmd_report(args) -> int:
    from sweeps.reporting.search_report import search_report

    print(f"grpo report: {search_report(args.spec, args.storage, args.out_root, args.out)}")
    return 0


def _cmd_reproduce(args) -> int:
    from sweeps.reporting.reproduce import reproduce

    return reproduce(
        quick=args.quick,
        workers=args.workers,
        experiments=args.experiments,
        out=args.out,
        max_steps=args.max_steps,
        seeds=args.seeds,
        storage=args.storage,
        tracking_uri=args.tracking_uri,
        real=args.real,
        real_cpu=args.real_cpu,
        report_only=args.report_only,
        stop_after=args.stop_after,
    )


def _cmd_bench(args) -> int:
    import shlex

    from benchmarks.trl_bench import SETUPS, Knobs, run_bench
    from grpo_core.config.schema import LOSS_TYPES

    if args.device not in ("cpu", "cuda"):
        raise UserInputError(f"--device: unknown value {args.device!r}; allowed: cpu, cuda")
    if args.loss_type not in LOSS_TYPES:
        raise UserInputError(f"--loss-type: unknown value {args.loss_type!r}; allowed: {', '.join(LOSS_TYPES)}")
    for flag, value, low in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0), ("--block", args.block, 1)):
        if value is not None and value < low:
            raise UserInputError(f"{flag}: got {value}; allowed: an integer ≥ {low}")
    if args.beta < 0 or not args.learning_rate > 0:
        raise UserInputError("--beta must be ≥ 0 and --learning-rate > 0")
    names = args.setup or [n for n, s in SETUPS.items() if (args.device == "cuda" or not s.gpu_only) and not s.real]
    for name in names:
        if name not in SETUPS:
            raise UserInputError(f"--setup: unknown value {name!r}; allowed: {', '.join(SETUPS)}")
    if args.out is not None:
        _check_writable_file(args.out, "--out")
    knobs = Knobs(
        beta=args.beta,
        loss_type=args.loss_type,
        learning_rate=args.learning_rate,
        device=args.device,
        cache_dir=args.cache_dir,
        cpu_math=args.cpu_math,
    )
    command = "grpo bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    return run_bench(
        names, knobs, args.steps, args.warmup, args.block, memory=not args.no_memory, out=args.out, command=command
    )


def _cmd_peer(args) -> int:
    """`grpo peer SPEC --arm KEY=VALUE … --seeds …` (TRL trains the arm) or `… --one-step` (one step
    of both trainers on one batch): grpo_peer/."""
    if args.one_step:
        if args.seeds is not None:
            raise UserInputError(
                "--seeds: beside --one-step; allowed: --seed N (the batch's seed) with --one-step, "
                "--seeds with the trained check"
            )
        from grpo_peer.one_step import run_one_step

        return run_one_step(args.spec, args.arm, args.seed, args.out)
    if not args.seeds:
        raise UserInputError(
            "--seeds: missing; allowed: the seeds TRL trains the arm on (each with a finished "
            "grpo-lab run), or --one-step"
        )
    from grpo_peer.check import run_check

    return run_check(args.spec, args.arm, args.seeds, args.runs, args.out)


def _check_writable_file(path: str, flag: str) -> None:
    """Before a long command runs: its output file can be written (its folder exists, or can be
    made, and is writable; the path is not a folder)."""
    import tempfile

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    existing = next((p for p in [folder, *folder.parents] if p.exists()), Path("."))
    if target.is_dir():
        raise UserInputError(f"{flag} {path}: is a folder; allowed: a file path")
    try:  # a probe file in the nearest existing folder, removed at once (os.access says yes to root everywhere)
        if not existing.is_dir():
            raise OSError
        with tempfile.TemporaryFile(dir=existing):
            pass
        if target.exists() and not os.access(target, os.W_OK):
            raise OSError
    except OSError:
        raise UserInputError(f"{flag} {path}: cannot be written here; allowed: a file in a writable folder") from None


def _cmd_fetch_model(args) -> int:
    from grpo_core.tasks.models import FETCHABLE

    if args.name not in FETCHABLE:
        raise UserInputError(f"fetch-model: {args.name!r} is not a model it fetches; allowed: {', '.join(FETCHABLE)}")
    fetch, folder = FETCHABLE[args.name]
    print(fetch(args.dest or f"{defaults.MODELS}/{folder}"))
    return 0


def _cmd_recover(args) -> int:
    from grpo_core.mlflow_store import check_tracking_uri
    from grpo_core.mlflow_recovery import recover_runs

    uri = args.tracking_uri or defaults.TRACKING_URI
    check_tracking_uri(uri, must_exist=True)
    ended, left = recover_runs(uri)
    for run_id, name, steps, status in ended:
        print(f"ended as {status}: {name} ({run_id}), {steps} step(s) of metrics backfilled from its metrics.jsonl")
    for _, why in left:
        print(f"left RUNNING: {why}")
    print(f"grpo recover: {len(ended)} run(s) ended, {len(left)} left alone ({mask_secrets(uri)})")
    return 0


def _cmd_ui(args) -> int:
    from grpo_core.mlflow_store import check_tracking_uri, ui_command

    import socket

    uri = args.tracking_uri or defaults.TRACKING_URI
    if not 1 <= args.port <= 65535:
        raise UserInputError(f"--port: got {args.port}; allowed: an integer in 1-65535")
    check_tracking_uri(uri)
    with socket.socket() as probe:  # the UI would start, fail to bind and still exit 0
        try:
            probe.bind(("127.0.0.1", args.port))
        except OSError as exc:
            raise UserInputError(
                f"--port {args.port}: cannot listen on 127.0.0.1:{args.port} ({exc.strerror}); allowed: a free port"
            ) from None
    from sweeps.driving.ui_view import describe_links, find_sweep, sweep_links

    from grpo_core.mlflow_store import make_client

    base = f"http://127.0.0.1:{args.port}"
    client = make_client(uri)
    parent = find_sweep(client, args.sweep)
    if parent is None and args.sweep:
        raise UserInputError(
            f"--sweep {args.sweep}: no such sweep in {mask_secrets(uri)}; allowed: the name of a "
            f"sweep that ran on this store (`grpo trials SPEC` lists one's trials)"
        )
    cmd = ui_command(uri, args.port)
    from grpo_core.mlflow_store import artifact_root_for

    print(f"MLflow UI on {base} (store {uri}, artifacts {artifact_root_for(uri) or 'kept by the server'})")
    if parent is not None:
        print(describe_links(parent.data.tags["sweep"], sweep_links(client, parent, base)))
    else:
        print(f"no sweep on this store yet; runs of `grpo train`: {base}/#/experiments?workflowType=machine_learning")
    sys.stdout.flush()
    # MLflow's server also starts a job runner (GenAI scorers, trace roll-ups) that a store of training
    # runs never uses: off unless set, the UI answers sooner (results/benchmarks/README.md)
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    # MLflow's server imports a Starlette module Starlette has deprecated: two lines of a warning
    # meant for MLflow's developers on every start, not for the user of the UI
    quiet = "ignore:starlette.middleware.wsgi is deprecated:Warning"
    os.environ["PYTHONWARNINGS"] = ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), quiet) if w)
    from .server_process import serve

    return serve(cmd)


def _pin_cpu_math(args) -> None:
    """Set this process's CPU math (config key cpu_math) from what the command will run, before
    anything imports torch; the processes it starts inherit it (grpo_core/util/cpu_math.py)."""
    from grpo_core.util import cpu_math

    if args.command == "train":
        mode = cpu_math.mode_for_train(args.config, args.overrides)
    elif args.command == "sweep":
        mode = cpu_math.mode_for_specs([args.spec])
    elif args.command == "peer":  # TRL has no switch of its own: the mode its runs have always had
        mode = "reproducible"
    elif args.command == "reproduce":
        from sweeps.paths import experiments_dir

        mode = cpu_math.mode_for_specs(
            sorted(experiments_dir(args.experiments, args.real, args.real_cpu).glob("*.yaml"))
        )
    elif args.command == "bench":
        mode = args.cpu_math
    else:
        mode = cpu_math.DEFAULT
    cpu_math.pin(mode)


PATH_FLAGS = ("out", "out_root", "storage", "tracking_uri", "experiments")  # flags that name a place


def _no_empty_paths(args) -> None:
    """An empty place (`--out ''`, a variable that was not set) is refused: it had meant "the
    default" in silence, so a run landed where the user had not asked."""
    for name in PATH_FLAGS:
        if getattr(args, name, None) == "":
            raise UserInputError(
                f"--{name.replace('_', '-')} '': empty; allowed: a path (leave the flag out for the default)"
            )


def main(argv: list[str] | None = None) -> int:
    handle_sigterm()  # kill, Slurm, Kubernetes and docker send SIGTERM: handled as Ctrl-C
    remember_secrets(*(sys.argv[1:] if argv is None else argv), *os.environ.values())  # masked wherever they show
    args = build_parser().parse_args(argv)
    handlers = {
        "train": _cmd_train,
        "pretrain": _cmd_pretrain,
        "sweep": _cmd_sweep,
        "trials": _cmd_trials,
        "report": _cmd_report,
        "reproduce": _cmd_reproduce,
        "ui": _cmd_ui,
        "bench": _cmd_bench,
        "fetch-model": _cmd_fetch_model,
        "recover": _cmd_recover,
        "peer": _cmd_peer,
    }
    if args.verbose:  # MLflow's documented switch; quiet by default (its INFO lines are about its database)
        os.environ["MLFLOW_LOGGING_LEVEL"] = "INFO"
    else:
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    if "mlflow" in sys.modules:  # MLflow reads the variable once, on import: a notebook or test imported it first
        import logging

        logging.getLogger("mlflow").setLevel(os.environ["MLFLOW_LOGGING_LEVEL"].upper())
    # MLflow prints "View run … at: <tracking URI>" per run on a tracking server: with the credentials of
    # a user:password@ address, and once per trial of a sweep. The commands print their own links.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    try:
        _no_empty_paths(args)
        if args.command in ("train", "pretrain", "sweep", "reproduce", "bench", "peer"):  # the commands that load torch
            from grpo_core.util.memory import check_address_space

            check_address_space(args.command)
        _pin_cpu_math(args)
        return handlers[args.command](args)
    except UserInputError as exc:
        if is_main_process():  # the other processes of a data-parallel run found the same
            print(f"grpo: error: {mask_secrets(exc)}", file=sys.stderr)
        return 2
    except RecordIncomplete as exc:
        if is_main_process():
            print(f"grpo: {mask_secrets(exc)}", file=sys.stderr)
        return 1
    except PeerDied as exc:  # recorded as killed, naming the process that died
        print(f"grpo: run killed: {mask_secrets(exc)}; recorded as killed", file=sys.stderr)
        from grpo_core.util.distributed import leave

        leave(1)
    except RunFailure as exc:
        if is_main_process():
            print(f"grpo: run failed: {mask_secrets(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of our output left (`grpo trials | head -1`): what ran is recorded
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush fails no more
        return 141  # as a process that SIGPIPE ended
    except KeyboardInterrupt as exc:
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        started = getattr(sys.modules.get("grpo_core.run"), "runs_started", 0)
        recorded = getattr(exc, "__notes__", None) or [  # a note: what its record holds, when not all of it
            "the run is recorded as killed"
            if started
            else "no run had started in this process: nothing was recorded by it"
        ]
        if is_main_process():  # say what is recorded only where something was (a sweep's workers say their own)
            print(f"grpo: {what}; {mask_secrets(recorded[-1])}", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130


if __name__ == "__main__":
    sys.exit(main())
