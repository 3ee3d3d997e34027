"""The report's "Peer check": one arm of a claim spec trained by TRL's GRPOTrainer
(benchmarks/peer_check.py, run folders under <runs root>/../peer/<sweep>/seed-<n>/) beside
grpo-lab's runs of the same arm. The trainers sample their own prompts and completions, so the two
are independent samples: per metric the Hodges-Lehmann shift (TRL − grpo-lab) with its exact 95%
interval and a two-sided rank-sum test. They agree on steps_to_learn when the test reads no
difference and the interval lies within ±2 steps; where the interval is wider, the check cannot
tell yet (more seeds). With fewer than MIN_PEER_RUNS TRL runs it shows them and reads nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import yaml

from . import statistics as st
from .statistics import ALPHA
from grpo_core.record.run_metrics import CENSORED
from grpo_core.util.files import read_metrics

from ..paths import REPO
from .runs import _label, Run
from .verdicts import fmt_interval

if TYPE_CHECKING:  # a type only: the sweep spec builds configs (torch); the verdicts read its data
    from ..spec import SweepSpec

AGREE_WITHIN = 2.0  # steps: the largest difference in steps_to_learn the interval may allow
AGREE, DISAGREE, CANNOT_TELL = "agree", "disagree", "cannot tell yet"
MIN_PEER_RUNS = 6  # TRL runs (seeds) before the check is tested: fewer are shown, not read


def shown_spec_path(spec: SweepSpec) -> str:
    """The spec as a report shows it: its path in this repository, or its file name for a spec
    from elsewhere (a report never names a folder outside the repository)."""
    if not spec.path:
        return spec.name
    path = Path(spec.path).resolve()
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return path.name


@dataclass
class PeerRun:
    seed: int
    config: dict
    summary: dict
    metrics: list


def peer_runs(folder: Path) -> list[PeerRun]:
    """The finished TRL runs under one sweep's peer folder (seed-*/), in seed order."""
    out = []
    for sub in sorted(folder.glob("seed-*")):
        try:
            summary = json.loads((sub / "summary.json").read_text())
            config = yaml.safe_load((sub / "config.yaml").read_text())
            metrics = read_metrics(sub / "metrics.jsonl")
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if isinstance(summary, dict) and summary.get("status") == "finished" and isinstance(config, dict):
            out.append(PeerRun(int(config["seed"]), config, summary, metrics))
    return sorted(out, key=lambda r: r.seed)


def _values(runs: list[Run], metric: str, horizon: int) -> list[float]:
    """A metric of each run, as the report reads it (Run.value), a censored one counted at the
    horizon (never learned: at max_steps)."""
    values = [r.value(metric) for r in runs]
    return st.capped(values, horizon) if metric in CENSORED else values


def peer_section(spec: SweepSpec, runs: list[Run], folder: Path) -> tuple[str, Optional[str]]:
    """The Markdown of the peer check of one spec, and its outcome on steps_to_learn (None without
    peer runs)."""
    peers = peer_runs(folder)
    if not peers:
        return "", None
    arm = {k: peers[0].config[k] for k in spec.grid}
    ours = [r for r in runs if all(r.point[k] == v for k, v in arm.items())]
    if not ours:
        return "", None
    horizon = int(peers[0].config["max_steps"])
    lines = [f"### Peer check: TRL's GRPOTrainer beside grpo-lab ({_label(arm.items())})", "",
             f"The same arm trained by TRL (`python -m benchmarks.peer_check {shown_spec_path(spec)} --arm "
             f"{' '.join(f'{k}={v}' for k, v in arm.items())} --seeds …`): the same model, data, reward, LoRA, batch, "
             f"β, learning rate and steps; TRL samples its own prompts and completions, so the samples are "
             f"independent. Never-learned runs count at max_steps ({horizon}).", "",
             "| seed | grpo-lab steps_to_learn | TRL steps_to_learn | grpo-lab reward AUC | TRL reward AUC |",
             "|---|---|---|---|---|"]
    def stl(summary: Optional[dict]) -> str:
        if summary is None:
            return "–"
        return "not learned" if summary.get("steps_to_learn") is None else str(summary["steps_to_learn"])

    def auc(summary: Optional[dict]) -> str:
        return "–" if summary is None else f"{summary['reward_auc']:.3f}"

    by_seed = {r.point["seed"]: r.summary for r in ours}
    for p in peers:
        o = by_seed.get(p.seed)
        lines.append(f"| {p.seed} | {stl(o)} | {stl(p.summary)} | {auc(o)} | {auc(p.summary)} |")
    if len(peers) < MIN_PEER_RUNS or len(ours) < 2:
        outcome = f"in training ({len(peers)} of {MIN_PEER_RUNS} TRL runs finished)"
        lines += ["", f"**Peer check: {outcome}**: not tested until {MIN_PEER_RUNS} TRL runs (and 2 or more of "
                      f"grpo-lab's) have finished.", ""]
        return "\n".join(lines), outcome
    lines += ["", "| metric | grpo-lab runs | TRL runs | shift TRL − grpo-lab [95% CI] | rank-sum p | reads |",
              "|---|---|---|---|---|---|"]
    outcome = None
    for metric in ("steps_to_learn", "reward_auc"):
        a = _values(ours, metric, horizon)
        b = _values([Run({"seed": p.seed}, p.config, p.summary, p.metrics) for p in peers], metric, horizon)
        est, lo, hi = st.hodges_lehmann_two_sample(b, a)
        p = st.rank_sum_test(b, a)
        if p < ALPHA:
            reads = DISAGREE
        elif metric == "steps_to_learn" and not (-AGREE_WITHIN <= lo and hi <= AGREE_WITHIN):
            reads = CANNOT_TELL
        else:
            reads = AGREE
        if metric == "steps_to_learn":
            outcome = reads
        lines.append(f"| {metric} | {len(a)} | {len(b)} | {fmt_interval(est, lo, hi, metric)} | {p:.3g} | **{reads}** |")
    lines += ["", f"**Peer check: {outcome}** on steps_to_learn (agree: the rank-sum test reads no difference and the "
                  f"95% interval lies within ±{AGREE_WITHIN:g} steps).", ""]
    return "\n".join(lines), outcome
