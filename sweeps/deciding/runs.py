"""A finished run as the verdicts read it: plain data (its grid point, config, summary and per-step
metrics), whoever trained it, grpo-lab or TRL."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from grpo_core.record.run_metrics import CENSORED

from . import statistics as st


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
        """A run's value of `metric`: a summary key (censored ones: None -> inf) or
        `final:<per-step key>`, the mean over the last stl_window steps."""
        if metric.startswith("final:"):
            key = metric[len("final:"):]
            tail = [m[key] for m in self.metrics[-self.config["stl_window"]:] if m.get(key) is not None]
            return sum(tail) / len(tail) if tail else math.nan
        v = self.summary.get(metric)
        if v is None:
            return st.INF if metric in CENSORED else math.nan
        return float(v)
