"""What fraction of the CPU's float32 peak a real training step achieves (`profile_step.py --flops`). Figures: results/benchmarks/flops_cpu.md.

Two trainers of one config and seed take the same steps (the runs are deterministic): the first is
timed (no counter, so nothing slows it), the second counts each step's floating-point operations
with torch's FLOP counter (`torch.utils.flop_counter.FlopCounterMode`: matrix products, attention
and convolutions, forward and backward; element-wise work is not counted, so the rate is a lower
bound). The achieved rate is the counted FLOPs over the timed seconds of the same steps.

Two peaks to divide it by, for the run's threads:
- measured: a large float32 matrix product (2048 × 2048, torch.mm, the same threads), the rate the
  BLAS reaches on this machine, the practical ceiling for the step's dominant work;
- nominal: FMA units × float32 SIMD lanes × 2 × clock, from /proc/cpuinfo (16 lanes with avx512f,
  8 with avx2, 4 without; 2 FMA units a core, assumed: true of the Xeons and EPYCs of this project's
  machines, though AMD's Zen 4 runs AVX-512 on 256-bit units, half the nominal; the clock is the
  one the kernel reports, which a VM may hold at its nominal value).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from pathlib import Path


def cpu_flags_and_clock() -> tuple[set, float]:
    """The first CPU's flags and its clock in GHz as /proc/cpuinfo reports them (empty, nan: unknown)."""
    flags, mhz = set(), float("nan")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
            elif key.strip() == "cpu MHz" and mhz != mhz:
                mhz = float(value)
    except (OSError, ValueError):
        pass
    return flags, mhz / 1000


def nominal_peak(threads: int) -> tuple[float, str]:
    """Nominal float32 FLOP/s of `threads` cores, and how it was reckoned."""
    flags, ghz = cpu_flags_and_clock()
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    fma = 2 if "fma" in flags or "avx512f" in flags else 1
    per_cycle = 2 * lanes * fma  # an FMA is 2 FLOPs per lane
    return per_cycle * ghz * 1e9 * threads, (
        f"{fma} FMA unit(s) × {lanes} float32 lanes × 2 = {per_cycle} FLOP a "
        f"cycle × {ghz:.2f} GHz × {threads} thread(s)"
    )


def matmul_peak(threads: int, n: int = 2048, repeats: int = 5) -> float:
    """Measured float32 FLOP/s of an n × n matrix product on `threads` threads (the median of `repeats`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)  # the BLAS's first call sets itself up
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - started)
    finally:
        torch.set_num_threads(before)
    return 2 * n**3 / statistics.median(times)


def _step_times(cfg, warmup: int, steps: int, during=None) -> list[float]:
    """A fresh trainer's `steps` step times after `warmup` steps, those steps taken inside `during`."""
    from grpo_core.trainer import GRPOTrainer

    trainer = GRPOTrainer(cfg)
    try:
        for _ in range(warmup):
            trainer.train_step()
        with during or contextlib.nullcontext():
            return [trainer.train_step()["step_time"] for _ in range(steps)]
    finally:
        trainer.close()


def step_rate(cfg, warmup: int, steps: int) -> dict:
    """Counted FLOPs per step, the timed seconds of the same steps, and the achieved rate."""
    from torch.utils.flop_counter import FlopCounterMode

    seconds = _step_times(cfg, warmup, steps)
    counter = FlopCounterMode(display=False)
    _step_times(cfg, warmup, steps, during=counter)
    flops = counter.get_total_flops()
    return {
        "flops_per_step": flops / steps,
        "median_step_s": statistics.median(seconds),
        "achieved": flops / sum(seconds),
        "steps": steps,
    }


def report_lines(cfg, warmup: int, steps: int) -> list[str]:
    rate = step_rate(cfg, warmup, steps)
    threads = cfg.num_threads or 1
    measured = matmul_peak(threads)
    nominal, how = nominal_peak(threads)
    return [
        "## FLOP rate",
        "",
        f"{steps} steps after {warmup} unprofiled ones, timed by one trainer and counted by a second on the "
        f"same seed (torch's FLOP counter: matrix products and attention, forward and backward).",
        "",
        "| FLOPs per step (counted) | median step (s) | achieved FLOP/s | measured fp32 matmul peak "
        f"({threads} thread(s)) | share of it | nominal fp32 peak | share of it |",
        "|---|---|---|---|---|---|---|",
        f"| {rate['flops_per_step'] / 1e9:.1f} G | {rate['median_step_s']:.2f} | {rate['achieved'] / 1e9:.2f} G | "
        f"{measured / 1e9:.1f} G | {rate['achieved'] / measured:.1%} | {nominal / 1e9:.1f} G | "
        f"{rate['achieved'] / nominal:.1%} |",
        "",
        f"Nominal peak: {how}.",
    ]
