"""The report's "Peer check": one arm of a claim spec trained by TRL's GRPOTrainer
(`grpo peer`, grpo_peer/check.py, run folders under <runs root>/../peer/<sweep>/seed-<n>/) beside
grpo-lab's runs of the same arm. The trainers sample their own prompts and completions, so the two
are independent samples: per metric the Hodges-Lehmann shift (TRL − grpo-lab) with its exact 95%
interval and a two-sided rank-sum test. They agree on steps_to_learn when the test reads no
difference and the interval lies within ±2 steps; where the interval is wider, the check cannot
tell yet (more seeds). With fewer than MIN_PEER_RUNS TRL runs it shows them and reads nothing."""

from __future__ import annotations

import json
import statistics
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

# the margins within which the two trainers count as agreeing, declared before TRL's matched runs
# (steps_to_learn in steps; reward AUC, the mean training reward over the run)
PEER_MARGINS = {"steps_to_learn": 2.0, "reward_auc": 0.03}
AGREE, DISAGREE, NO_DIFFERENCE = "agree", "disagree", "no difference detected"
TRL_ARGS = "trl_args.json"  # beside a TRL run: each shared key's value in grpo-lab's config and in TRL's
ONE_STEP = "one_step.json"  # beside the peer runs: one step of both trainers on one batch (`grpo peer --one-step`, grpo_peer/one_step.py)
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


def trl_config_lines(folder: Path) -> list[str]:
    """TRL's config against grpo-lab's, key by key, as grpo_peer/check.py recorded it beside
    each TRL run (the first seed's; a key where they differ is marked); a note where none was."""
    recorded = sorted(folder.glob(f"seed-*/{TRL_ARGS}"))
    if not recorded:
        return [
            "TRL's config was not recorded beside these runs (they predate the key-by-key record); they ran "
            "TRL 1.16's defaults for the keys the peer check did not pass, among them use_bias_correction_kl "
            "True where grpo-lab's runs have it False (it changes the KL gradient at β > 0): train the peer seeds "
            "again with `grpo peer` for a matched comparison.",
            "",
        ]
    rows = json.loads(recorded[0].read_text())
    lines = [
        f"TRL's config beside grpo-lab's, key by key ({recorded[0].parent.name}/{TRL_ARGS}):",
        "",
        "| key | grpo-lab | TRL | |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {key} | {ours} | {theirs} | {'' if ours == theirs else '**differs**'} |" for key, ours, theirs in rows
    ]
    return lines + [""]


def one_step_lines(spec: SweepSpec, folder: Path) -> list[str]:
    """The one-step comparison (`grpo peer --one-step`, grpo_peer/one_step.py) as a table: per loss type and β, the
    largest difference of each term between the two trainers on one shared batch and whether all
    lie within the recorded bounds; nothing where it was not run."""
    path = folder / ONE_STEP
    if not path.is_file():
        return []
    record = json.loads(path.read_text())
    tol = record["tolerance"]
    terms = list(tol)
    arm = " ".join(f"{k}={v}" for k, v in record["arm"].items())
    lines = [
        f"One step of both trainers on the same batch (`grpo peer {shown_spec_path(spec)} "
        f"--arm {arm} --one-step --seed {record['seed']}`, seed {record['seed']}): grpo-lab samples the batch, TRL is handed its completions, both "
        f"hold the same LoRA weights (B perturbed from zero, so the policy is not its reference); clipping and "
        f"dropout off. Each cell is the largest difference between the two (loss: relative to TRL's; gradient: "
        f"‖Δ‖ / ‖TRL's‖ over every LoRA matrix); the bound is under each term's name. {record['versions']}.",
        "",
        "| loss_type | β | " + " | ".join(f"{t} (≤ {tol[t]:.0e})" for t in terms) + " | reads |",
        "|---|---|" + "---|" * len(terms) + "---|",
    ]
    for row in record["steps"]:
        cells = ["–" if row["diff"].get(t) is None else f"{row['diff'][t]:.1e}" for t in terms]
        reads = (
            AGREE
            if row["agree"]
            else "**differ**"
            + (f" ({', '.join(k for k, _, _ in row['differing_keys'])} differs)" if row["differing_keys"] else "")
        )
        lines.append(f"| {row['loss_type']} | {row['beta']:g} | " + " | ".join(cells) + f" | {reads} |")
    agree = sum(row["agree"] for row in record["steps"])
    return lines + ["", f"**One step: {agree} of {len(record['steps'])} settings agree.**", ""]


def peer_section(spec: SweepSpec, runs: list[Run], folder: Path) -> tuple[str, Optional[str]]:
    """The Markdown of the peer check of one spec, and its outcome on steps_to_learn (None without
    peer runs)."""
    peers = peer_runs(folder)
    if not peers:
        return "", None
    arm = {k: v for k, v in spec.point_of(peers[0].config).items() if k != "seed"}
    ours = [r for r in runs if all(r.point[k] == v for k, v in arm.items())]
    if not ours:
        return "", None
    horizon = int(peers[0].config["max_steps"])
    lines = [
        f"### Peer check: TRL's GRPOTrainer beside grpo-lab ({_label(arm.items())})",
        "",
        f"The same arm trained by TRL (`grpo peer {shown_spec_path(spec)} --arm "
        f"{' '.join(f'{k}={v}' for k, v in arm.items())} --seeds …`): the same model, data, reward, LoRA, batch, "
        f"β, learning rate and steps; TRL samples its own prompts and completions, so the samples are "
        f"independent. Never-learned runs count at max_steps ({horizon}).",
        "",
        "| seed | grpo-lab steps_to_learn | TRL steps_to_learn | grpo-lab reward AUC | TRL reward AUC |",
        "|---|---|---|---|---|",
    ]

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
        lines += [
            "",
            f"**Peer check: {outcome}**: not tested until {MIN_PEER_RUNS} TRL runs (and 2 or more of "
            f"grpo-lab's) have finished.",
            "",
        ]
        return "\n".join(lines + one_step_lines(spec, folder) + trl_config_lines(folder)), outcome
    lines += [
        "",
        "| metric | grpo-lab runs | TRL runs | shift TRL − grpo-lab [95% CI] | rank-sum p | reads |",
        "|---|---|---|---|---|---|",
    ]
    reads_of = {}
    for metric, margin in PEER_MARGINS.items():
        a = _values(ours, metric, horizon)
        b = _values([Run({"seed": p.seed}, p.config, p.summary, p.metrics) for p in peers], metric, horizon)
        est, lo, hi = st.hodges_lehmann_two_sample(b, a)
        p = st.rank_sum_test(b, a)
        if p < ALPHA:
            reads = DISAGREE
        elif -margin < lo and hi < margin:
            reads = AGREE
        else:
            reads = NO_DIFFERENCE
        reads_of[metric] = reads
        lines.append(
            f"| {metric} (margin ±{margin:g}) | {len(a)} | {len(b)} | {fmt_interval(est, lo, hi, metric)} | "
            f"{p:.3g} | **{reads}** |"
        )
    outcome = (
        DISAGREE
        if DISAGREE in reads_of.values()
        else AGREE
        if all(r == AGREE for r in reads_of.values())
        else NO_DIFFERENCE
    )
    lines += [
        "",
        f"**Peer check: {outcome}** (agree: on each metric the rank-sum test reads no difference and the "
        f"95% interval lies inside the declared margin, steps ±{PEER_MARGINS['steps_to_learn']:g}, reward "
        f"AUC ±{PEER_MARGINS['reward_auc']:g}; no difference detected: not significant, but the interval "
        f"still allows a gap beyond the margin; disagree: significant on either).",
        "",
    ]
    lines += step_time_lines(ours, peers) + one_step_lines(spec, folder) + trl_config_lines(folder)
    return "\n".join(lines), outcome


def step_time_lines(ours: list[Run], peers: list[PeerRun]) -> list[str]:
    """Each trainer's step time (the median over its runs of each run's median step), with the CPUs
    its runs record; a timing, not a verdict: the runs were made on their own machines and days."""

    def timing(summaries: list[dict]) -> str:
        times = sorted(t for s in summaries if isinstance(t := s.get("median_step_time_s"), (int, float)))
        if not times:
            return "not recorded"
        cpus = sorted({s["device_name"] for s in summaries if s.get("device_name")})
        return f"{statistics.median(times):.1f} s (median of {len(times)} runs{'; ' + ', '.join(cpus) if cpus else ''})"

    return [
        f"Step time, a timing and not a verdict (each trainer's runs two side by side on a 2-core CPU, on their "
        f"own days): grpo-lab {timing([r.summary for r in ours])}; TRL {timing([p.summary for p in peers])}.",
        "",
    ]
