"""The report's lines around its sections: the summary table's rows (each verdict with its
reward-AUC twin, what it could detect, its control and its mechanism check), the CPU math and
versions the runs were made with, and the time they took. `grpo reproduce` (reproduce.py) writes them."""

from __future__ import annotations

from typing import Optional

from grpo_core.record.provenance import versions
from grpo_core.record.run_metrics import CENSORED
from grpo_core.util.cpu_math import describe

from ..deciding.verdicts import Verdict, fmt_value, is_supported
from .report import detectable_text


def versions_warning(runs: list) -> str:
    """One line when runs of this report were made with package versions other than the ones
    installed here ('' when all match): their numbers are bit-reproducible only with theirs."""
    here = versions()
    differ: dict[str, set] = {}
    for run in runs:
        for part in str(run.summary.get("versions", "")).split(", "):
            name, _, version = part.rpartition(" ")
            if name and name in here and here[name] != version:
                differ.setdefault(name, set()).add(version)
    if not differ:
        return ""
    listed = "; ".join(f"{n} {', '.join(sorted(v))} (here {here[n]})" for n, v in sorted(differ.items()))
    return (
        f"grpo reproduce: warning: runs of this report were made with other versions: {listed}; runs trained "
        f"here may not match them bit for bit (scripts/bootstrap.sh installs requirements/lock-cpu.txt)"
    )


def cpu_math_line(runs: list) -> str:
    """The CPU math and threads every run used: what another machine must match to get the same numbers."""
    modes = sorted({str(r.config.get("cpu_math", "not recorded")) for r in runs})
    threads = sorted({r.config.get("num_threads") for r in runs}, key=str)
    kernels = sorted({str(r.summary.get("cpu_capability", "not recorded")) for r in runs})
    branches = sorted({str(r.summary["mkl_branch"]) for r in runs if "mkl_branch" in r.summary})
    described = "; ".join(describe(m) if m in ("reproducible", "native") else m for m in modes)
    cpus = sorted({str(r.summary.get("device_name", "not recorded")) for r in runs})
    mkl = f"; MKL branch: {', '.join(branches)}" if branches else ""  # recorded since 2026-11-25
    return (
        f"**CPU math:** {described} in {'every run' if len(modes) == 1 else 'these runs'} (ATen kernels used: "
        f"{', '.join(kernels)}{mkl}); num_threads {', '.join(map(str, threads))} per run; made on: "
        f"{'; '.join(cpus)}. Another x86-64 machine with a CPU of the same vendor, the same versions, "
        f"`cpu_math: reproducible` and the same num_threads trains the same runs bit for bit; between AMD and "
        f"Intel CPUs MKL's products part in the last bits even so: MKL takes MKL_CBWR=AVX2 on Intel CPUs only "
        f"and runs its AUTO branch on others (`tests/test_cross_machine.py` checks references per vendor)."
    )


def _wall_time(runs: list) -> float:
    """The runs' wall_time_s summed (a run that recorded none counts 0)."""
    return sum(float(r.summary.get("wall_time_s") or 0) for r in runs)


def timing_lines(
    timing: dict, run_time: float, workers: int, quick: bool, committed_time: float = 0.0, committed_runs: int = 0
) -> list[str]:
    """What the report says of the time its runs took. `timing`: the last training invocation's
    record (wall_time_s None when no invocation here trained; runs_before: the finished run folders
    it took as done); `run_time`: the runs' wall_time_s summed; `committed_runs` (their wall_time_s
    summed: `committed_time`): the report's runs that no invocation here trains, the real model's,
    read from their committed folders."""
    in_parts = [
        f"the runs were trained in parts; together they ran {run_time / 60:.1f} min (the sum of their "
        f"wall_time_s: about {run_time / 60 / max(workers, 1):.1f} min of wall time on {workers} workers)"
    ]
    if timing["wall_time_s"] is None:
        return in_parts
    if timing.get("runs_before"):  # the last invocation trained what was missing beside finished run folders
        return in_parts + [
            f"the last part: {timing['wall_time_s'] / 60:.1f} min wall ({timing['date']}, beside "
            f"{timing['runs_before']} finished run folders it took as done)"
        ]
    trained = "every run of the CPU testbed's claims" if committed_runs else "every run of this report"
    lines = [
        f"this {'quick' if quick else 'full'} reproduction: {timing['wall_time_s'] / 60:.1f} min wall "
        f"({timing['date']}, training {trained})"
    ]
    if committed_runs:
        lines.append(
            f"the real model's {committed_runs} runs were trained in parts and read from their committed "
            f"folders (together {committed_time / 60:.1f} min, the sum of their wall_time_s)"
        )
    return lines


SUMMARY_HEAD = [
    "| claim | question | verdict | on reward AUC | n per set | detectable with 80% power (power of a null at the target) | control: median "
    "(censored) | mechanism check |",
    "|---|---|---|---|---|---|---|---|",
]


def summary_row(claim: str, v: Verdict, twin: Optional[Verdict]) -> str:
    """A verdict's row of the summary table, its reward-AUC twin folded in."""

    def detectable(x: Optional[Verdict]) -> str:
        return detectable_text(x.facts) if x is not None and x.facts else "–"

    f = v.facts
    n = " and ".join(map(str, f["n_per_set"])) if f else "–"

    def power(x: Optional[Verdict], what: str) -> str:  # the verdict's own power, beside a null or an undecided one
        if (
            x is None
            or not x.facts
            or "verdict_power" not in x.facts
            or is_supported(x.verdict)
            or x.verdict.startswith("contradicted")
        ):
            return ""
        return f"; {what}power {x.facts['verdict_power']:.0%} at {x.facts['power_at']:.3g}"

    det = (
        detectable(v)
        + power(v, "")
        + (f"; AUC {detectable(twin)}{power(twin, 'AUC ')}" if twin is not None and twin.facts else "")
    )
    first = f.get("levels_of", "")  # a test across several levels: its first level stands as the control
    control = (
        "; ".join(
            f"{', '.join(filter(None, (label, first))) + ': ' if label or first else ''}"
            f"{fmt_value(med, f['metric'])}" + (f" ({cens}/{k})" if f["metric"] in CENSORED else "")
            for label, med, cens, k in f["control"]
        )
        if f
        else "–"
    )
    control = control or "no finished run yet"  # a spec in training whose control arm has none
    checks = "; ".join(check_cell(c) for c in v.checks) or "–"
    return (
        f"| {claim} | {v.statement} | **{v.verdict}{sequential_note(v)}** | "
        f"{('**' + twin.verdict + sequential_note(twin) + '**') if twin else '–'} | {n} | "
        f"{det} | {control} | {checks} |"
    )


def sequential_note(v: Verdict) -> str:
    """Where a test under a declared sequential design stands, after its verdict: "; sequential: open at
    look 1 (8 pairs)"."""
    return f"; sequential: {v.sequential}" if v.sequential else ""


def check_cell(check) -> str:
    """A manipulation check in a table cell: its state and values, "not engaged (loss_type=dapo: 0.0012;
    needs ≥ 0.02)"."""
    return f"{check.state()} ({check.values_text(', ')}; needs {check.threshold})"
