"""Where a run ran: the CPU or GPU, library versions, and the base model's checksum. Every run
records these in summary.json (and as MLflow tags), and the report prints them."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import socket
from pathlib import Path
from typing import Optional

VERSIONED = ("torch", "transformers", "accelerate", "datasets", "peft", "optuna", "mlflow", "scipy")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def gpu_name() -> str:
    """The name of the GPU torch uses, or '' without one."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


def gpu_driver() -> str:
    """The NVIDIA driver's version (nvidia-smi), or '' where there is none."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def versions(names: tuple[str, ...] = VERSIONED) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    out["python"] = platform.python_version()
    return out


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine() -> str:
    """One line: CPU, cores, memory, OS, and the GPU when there is one."""
    cores = usable_cpus()
    mem = ""
    try:
        kb = int(
            next(
                line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
            ).split()[1]
        )
        mem = f", {kb / 2**20:.0f} GiB memory"
    except (OSError, StopIteration, ValueError):
        pass
    gpu = gpu_name()
    return f"{cpu_name()}, {cores} cores{mem}, {platform.system()} {platform.machine()}, " + (gpu or "no GPU used")


def run_record(device: str, base_sha256: str) -> dict[str, str]:
    """The summary.json fields that say where a run ran, with which CPU math and on which base
    weights (string values: MLflow tags)."""
    import torch

    from grpo_core.util.cpu_math import cpu_capability, mkl_branch, process_mode

    return {
        "base_model_sha256": base_sha256,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else cpu_name(),
        "versions": ", ".join(f"{k} {v}" for k, v in versions().items()),
        "cpu_math": process_mode(),
        "cpu_capability": cpu_capability(),
        "mkl_branch": mkl_branch(),
    }


# ---- the process that owns a run: `host:pid:start time`, to tell later whether it is gone ----------
def _process_start(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (Linux), or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of stat; fields after the command name


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start(os.getpid()) or ''}"


def owner_alive(owner: str) -> Optional[bool]:
    """False when the owner ran on this host and is gone; None when it cannot be told here."""
    try:
        host, pid, start = owner.rsplit(":", 2)
    except ValueError:
        return None
    if host != socket.gethostname() or not start or not Path("/proc/self/stat").exists():
        return None
    return _process_start(int(pid)) == start
