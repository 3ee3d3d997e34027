import os
import grpo_core  # noqa: F401  (first: pins the CPU math before any test imports torch; grpo_core/cpu_math.py)
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "results" / "local" / "cache"  # tiny base models are built once and reused
sys.path.insert(0, str(Path(__file__).resolve().parent))  # reward_helpers importable by path


def make_cfg(**overrides):
    from grpo_core.config import config_from_dict

    values = dict(cache_dir=str(CACHE), max_steps=4, baseline_prompts=16, eval_prompts=32)
    values.update(overrides)
    values.setdefault("stl_window", max(1, min(20, values["max_steps"] // 2)))  # a window the run can fill
    return config_from_dict(values)


@pytest.fixture
def cfg_factory():
    return make_cfg


def run_grpo(*args, cwd=ROOT, timeout=None):  # no wall-clock limit: a slow machine is not a failure
    """The `grpo` command in a real process, with tests/ importable (reward_helpers)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, "-m", "grpo_lab", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)
