"""One baseline per set-up: the threshold steps_to_learn is measured against, the same for every run
of a set-up whatever machine trained it.

Each run measures its baseline before its first step (grpo_core/tasks/baseline.py: one fixed
sampling stream, so every seed of a set-up shares it), but the stream's samples depend on the
float math: runs made on Intel and AMD CPUs sample different completions (MKL takes another branch
on each) and measure the same quantity twice. C5 with room for lengths had 0.094 on its Intel runs
and 0.109 on its AMD runs, with 14 of 16 seeds mixing vendors across arms, so the arms' thresholds
differed by the machine, not by the claim. The report therefore reads the set-up's baseline from
the testbed's register (`baselines.json` beside its `runs/`), and recomputes steps_to_learn,
learned and completions_to_learn of every run of that set-up against it
(`python -m sweeps.reporting.baselines` records the set-ups that have no entry yet).

An entry, once written, is never changed by later runs: it pools the distinct estimates the
set-up's runs recorded when it was written (their mean, each machine's estimate counted once; its
standard error the mean of theirs, not reduced, since the estimates share their prompts), and
lists them. A set-up with no entry keeps each run's own baseline, and the report says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from grpo_core.record.run_metrics import completion_counts, summarize
from grpo_core.util.files import write_text_atomic

from .runs import Run

REGISTER = "baselines.json"  # beside a testbed's runs/ folder
# what the baseline's value depends on (grpo_core/tasks/baseline.py: cache_path's key), as a run's config records it
BASELINE_KEYS = (
    "model",
    "task",
    "dataset",
    "prompt_column",
    "answer_column",
    "reward_funcs",
    "reward_weights",
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_p",
    "top_k",
    "baseline_prompts",
    "stl_delta",
    "dtype",
    "device",
)
PROMPT_TEMPLATE = "prompt_template"  # in the key only where set: a key without it is the prompt alone


def setup_key(run: Run) -> dict:
    """The baseline's set-up of a run: its config's BASELINE_KEYS (and its prompt_template where one
    is set) and the weights it loaded."""
    key = {k: run.config.get(k) for k in BASELINE_KEYS}
    if run.config.get(PROMPT_TEMPLATE):
        key[PROMPT_TEMPLATE] = run.config[PROMPT_TEMPLATE]
    key["base_model_sha256"] = run.summary.get("base_model_sha256")
    return key


def _id(key: dict) -> str:
    return json.dumps(key, sort_keys=True, default=str)


def read_register(path: Path) -> dict:
    """The register's entries by set-up ({} where there is no register)."""
    if not path.is_file():
        return {}
    return {_id(entry["setup"]): entry for entry in json.loads(path.read_text())}


def estimates(runs: list[Run]) -> dict:
    """Per set-up, the distinct baselines its runs recorded: (value, se, prompts) → the machines and
    how many runs recorded it."""
    found: dict = {}
    for r in runs:
        if r.summary.get("baseline_reward") is None:
            continue
        est = (
            float(r.summary["baseline_reward"]),
            float(r.summary.get("baseline_reward_se", math.nan)),
            int(r.summary.get("baseline_prompts_used", 0)),
        )
        key = setup_key(r)
        seen = found.setdefault(_id(key), {"setup": key, "by": {}})["by"]
        machines, n = seen.get(est, (set(), 0))
        seen[est] = (machines | {r.summary.get("device_name", "unrecorded")}, n + 1)
    return found


def pooled_entry(setup: dict, by: dict, date: str) -> dict:
    """A register entry from a set-up's distinct estimates (their mean; SE the mean of theirs)."""
    ests = sorted(by.items())
    value = sum(v for (v, _, _), _ in ests) / len(ests)
    se = sum(s for (_, s, _), _ in ests) / len(ests)
    return {
        "setup": setup,
        "baseline_reward": value,
        "baseline_reward_se": se,
        "recorded": date,
        "estimates": [
            {"baseline_reward": v, "baseline_reward_se": s, "prompts": p, "runs": n, "machines": sorted(m)}
            for (v, s, p), (m, n) in ests
        ],
    }


def record_missing(path: Path, runs: list[Run], date: Optional[str] = None) -> list[dict]:
    """Add an entry for every set-up of `runs` that has none; the entries added."""
    register = read_register(path)
    date = date or datetime.now(timezone.utc).strftime("%Y-%m-%d")
    added = [pooled_entry(e["setup"], e["by"], date) for k, e in estimates(runs).items() if k not in register]
    if added:
        entries = list(register.values()) + added
        write_text_atomic(path, json.dumps(entries, indent=1, default=str) + "\n")
    return added


def on_setup_baseline(run: Run, entry: Optional[dict]) -> Run:
    """The run with its set-up's baseline: steps_to_learn, learned and completions_to_learn
    recomputed from its rewards against the register's value (the run's own kept as
    `run_baseline_reward`). Unchanged where the set-up has no entry or the values agree."""
    if entry is None or run.summary.get("baseline_reward") == entry["baseline_reward"]:
        return run
    cfg, s = run.config, run.summary
    rewards = [float(m["reward"]) for m in run.metrics]
    losses = [float(m["loss"]) for m in run.metrics]
    new = summarize(
        rewards,
        losses,
        entry["baseline_reward"],
        int(cfg["stl_window"]),
        float(cfg["stl_delta"]),
        float(cfg.get("loss_departure_eps", 1e-3)),
    )
    summary = {
        **s,
        "steps_to_learn": new["steps_to_learn"],
        "learned": new["learned"],
        "baseline_reward": entry["baseline_reward"],
        "baseline_reward_se": entry["baseline_reward_se"],
        "run_baseline_reward": s["baseline_reward"],
    }
    if "completions_to_learn" in s and all("completions/generated" in m for m in run.metrics):
        summary.update(completion_counts([m["completions/generated"] for m in run.metrics], new["steps_to_learn"]))
    return replace(run, summary=summary)


def with_setup_baselines(runs: list[Run], register: dict) -> list[Run]:
    return [on_setup_baseline(r, register.get(_id(setup_key(r)))) for r in runs]
