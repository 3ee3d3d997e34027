"""Reproducible CPU math: the config key `cpu_math`, and pinning the process's math paths.

torch picks its CPU kernels per machine: ATen dispatches to the widest vector instructions the
CPU has (AVX-512 where present, else AVX2), MKL chooses a code path per CPU model, oneDNN per
instruction set. Each choice sums floating-point numbers in its own order, so the same run on two
x86-64 machines drifts apart after tens of steps, and the chaotic runs of a report (a large
learning rate) end up on different trajectories. `reproducible` pins all three to their AVX2 paths,
which every x86-64 CPU since 2015 has:

    ATEN_CPU_CAPABILITY=avx2   MKL_CBWR=AVX2   ONEDNN_MAX_CPU_ISA=AVX2

These are read when torch loads (and when MKL and oneDNN first run), so they must be in the
environment before `import torch`; child processes inherit them. `native` clears them and lets
each library choose (faster on some CPUs, not the same numbers on another machine).

This module never imports torch at import time: `grpo_lab` calls `pin` before anything else, and
`grpo_core/__init__.py` pins the default for library users who import grpo_core before torch.
"""

from __future__ import annotations

import os
import sys

MODES = ("reproducible", "native")
DEFAULT = "reproducible"
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
ENV_MODE = "GRPO_CPU_MATH"  # the mode the `grpo` command chose, for the processes it starts

_at_torch_load: dict = {}  # the three variables as they were when torch loaded (see _snapshot)


def pin(mode: str) -> None:
    """Set this process's CPU math for `mode`, before torch loads; children inherit it. A mode
    that is not one of MODES is left to the config's validation (nothing is changed). Once torch
    is loaded the environment is left as it is: `process_mode` then tells what torch runs with."""
    if mode not in MODES or "torch" in sys.modules:
        _snapshot()
        return
    os.environ[ENV_MODE] = mode
    for key, value in PINNED.items():
        if mode == "reproducible":
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    _snapshot()


def _snapshot() -> None:
    """Remember the variables torch loads (or loaded) with: the first call's view when torch is
    already imported, the current one otherwise."""
    if _at_torch_load and "torch" in sys.modules:
        return
    _at_torch_load.clear()
    _at_torch_load.update({k: os.environ.get(k) for k in PINNED})


def process_mode() -> str:
    """`reproducible` when this process's torch loaded with the three pinned values, else `native`."""
    _snapshot()
    return "reproducible" if all(_at_torch_load.get(k) == v for k, v in PINNED.items()) else "native"


def describe(mode: str) -> str:
    """One line for reports and logs."""
    if mode == "reproducible":
        return "reproducible (" + ", ".join(f"{k}={v}" for k, v in PINNED.items()) + ")"
    return "native (each library picks its CPU kernels: numbers may differ between machines)"


def cpu_capability() -> str:
    """The instruction set ATen's CPU kernels use in this process (AVX2, AVX512, DEFAULT, ...)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


# MKL's CNR branch codes (mkl_cbwr_get(MKL_CBWR_BRANCH)), as Intel's reference names them
MKL_BRANCHES = {
    1: "OFF",
    2: "AUTO",
    3: "COMPATIBLE",
    4: "SSE2",
    6: "SSSE3",
    7: "SSE4_1",
    8: "SSE4_2",
    9: "AVX",
    10: "AVX2",
    11: "AVX512_MIC",
    12: "AVX512",
    13: "AVX512_MIC_E1",
    14: "AVX512_E1",
}


def mkl_branch() -> str:
    """The code branch MKL computes with in this process, as MKL reports it: `AVX2` where
    MKL_CBWR=AVX2 took effect; `AUTO` where MKL refused it, which Intel documents for non-Intel CPUs
    (on an AMD EPYC, 2026-11-25: the variable gives AUTO, and setting AVX2 by call returns
    MKL_CBWR_ERR_UNSUPPORTED_BRANCH); `OFF` without the variable; `no MKL` where torch was built
    without it. AUTO is reproducible between runs on one machine, not between CPU vendors."""
    import ctypes

    import torch

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get  # MKL is linked into torch's x86-64 CPU library
    except (OSError, AttributeError):
        return "no MKL"
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    code = get(1)  # MKL_CBWR_BRANCH
    return MKL_BRANCHES.get(code, str(code))


def check_process(mode: str) -> None:
    """A run's `cpu_math` must be what this process computes with (the logged value is the value
    used). Raises a one-line ConfigError otherwise."""
    from grpo_core.util.errors import ConfigError

    actual = process_mode()
    if actual != mode:
        raise ConfigError(
            "cpu_math",
            f"this process already loaded torch with {actual} CPU math, the config asks "
            f"for {mode}; allowed: {actual} here, or run through the `grpo` command (which "
            f"sets it before torch loads), or call grpo_core.util.cpu_math.pin({mode!r}) "
            f"before importing torch",
        )


# ---- which mode a command line asks for, read before torch loads ---------------------------------------
def _read_mapping(path) -> dict:
    """A YAML file's top-level mapping, or {} when it cannot be read (the command's own validation
    reports that, after this)."""
    from grpo_core.util.yaml_files import read_yaml_mapping

    try:
        return read_yaml_mapping(path)
    except Exception:
        return {}


def _override(overrides: list[str]):
    from grpo_core.util.yaml_files import parse_yaml_value

    value = None
    for text in overrides:
        key, _, raw = text.partition("=")
        if key.strip() == "cpu_math":
            try:
                value = parse_yaml_value(raw)
            except Exception:
                value = raw
    return value


def mode_for_train(config_path, overrides: list[str]) -> str:
    """`grpo train CONFIG --set ...`: the mode its config will have."""
    value = _override(overrides)
    if value is None and config_path:
        value = _read_mapping(config_path).get("cpu_math")
    return value if value in MODES else DEFAULT


def mode_for_specs(paths) -> str:
    """`grpo sweep` / `grpo reproduce`: the mode every spec's base asks for (one process pins one
    mode, so a grid cannot vary it: sweeps/spec.py refuses that). Raises UserInputError when specs
    of one command ask for different modes."""
    from grpo_core.util.errors import UserInputError

    modes = {}
    for path in paths:
        base = _read_mapping(path).get("base")
        value = base.get("cpu_math") if isinstance(base, dict) else None
        modes[str(path)] = value if value in MODES else DEFAULT
    if len(set(modes.values())) > 1:
        listed = ", ".join(f"{p}: {m}" for p, m in modes.items())
        raise UserInputError(
            f"cpu_math: the specs of one command ask for different modes ({listed}); "
            f"allowed: one mode for all (a process pins its CPU math once)"
        )
    return next(iter(modes.values()), DEFAULT)
