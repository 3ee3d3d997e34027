"""A finished run as the verdicts read it: plain data (its grid point, config, summary and per-step
metrics), whoever trained it, grpo-lab or TRL."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from grpo_core.record.run_metrics import CENSORED

from . import statistics as st
from ..report_spec import DERIVED_METRICS


def _label(pairs) -> str:
    """A grid point as text: `learning_rate=0.0001, seed=3`."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in pairs)


@dataclass
class Run:
    point: dict  # grid axis values and seed
    config: dict
    summary: dict
    metrics: list
    folder: Optional[Path] = None  # its run folder, where the report reads completions.jsonl

    def value(self, metric: str) -> float:
        """A run's value of `metric`: a summary key (censored ones: None -> inf),
        `final:<per-step key>`, the mean over the last stl_window steps, or one of
        DERIVED_METRICS, computed from what its folder holds."""
        if metric == "lr_to_learn":
            return lr_to_learn(self)
        if metric in DERIVED_METRICS:
            return final_length_by_correctness(self)[metric == "final_length_correct"]
        if metric.startswith("final:"):
            key = metric[len("final:") :]
            tail = [m[key] for m in self.metrics[-self.config["stl_window"] :] if m.get(key) is not None]
            return sum(tail) / len(tail) if tail else math.nan
        v = self.summary.get(metric)
        if v is None:
            return st.INF if metric in CENSORED else math.nan
        return float(v)


LR_UNIT = 1e-5  # lr_to_learn counts the learning rate given in steps at this rate


def lr_to_learn(run: Run) -> float:
    """[Claim C2] The learning rate the run was given before it learned: the sum of the rates of
    the updates before steps_to_learn (metrics.jsonl's learning_rate, the rate of each step's
    update), in steps at LR_UNIT. A ramp withholds rate early; a test on this asks whether the
    ramp delays learning beyond the rate it withholds. inf where the run never learned."""
    stl = run.summary.get("steps_to_learn")
    if stl is None:
        return st.INF
    return sum(m.get("learning_rate", math.nan) for m in run.metrics[: stl - 1]) / LR_UNIT


# [Claim C5] final_length_correct and final_length_wrong: the final completion length within right replies and within wrong
# ones: a loss normalization that changes accuracy changes the overall length through the mix of
# right and wrong replies alone (their lengths differ), so a length effect is read within each too


def final_length_by_correctness(run: Run) -> tuple[float, float]:
    """(wrong, right): the mean length in tokens of the completions the run logged
    (completions.jsonl, a sample of each step's) over its last stl_window steps whose reward is
    below 1 / at least 1 (every built-in reward pays 1 for a right reply); nan where it logged
    none of that kind there."""
    import json

    if run.folder is None or not (run.folder / "completions.jsonl").is_file():
        return math.nan, math.nan
    last = len(run.metrics) - run.config["stl_window"]
    lengths: tuple[list, list] = ([], [])
    for line in (run.folder / "completions.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
            step, reward, length = int(row["step"]), float(row["reward"]), float(row["length"])
        except (ValueError, KeyError, TypeError):
            continue
        if step > last:
            lengths[reward >= 1].append(length)
    return tuple(sum(x) / len(x) if x else math.nan for x in lengths)  # type: ignore[return-value]
