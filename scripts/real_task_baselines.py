"""Each real-model CPU task's untrained baseline on its held-out part, and how fast the default
set-up climbs it: writes results/real/cpu/tasks.md and the climb runs' folders.

    .venv/bin/grpo fetch-model
    .venv/bin/python scripts/real_task_baselines.py            # trains only the missing climb runs

Baseline: SmolLM2-135M-Instruct as it comes, the suite's sampler (8 completions per prompt of at
most 12 new tokens, temperature 1, the chat template), math_answer, on the task's held-out rows
(grpo holds out a fixed 10% of a data file: grpo_core/tasks.dataset_task), the first HELD_OUT of
them; the mean over prompts with its standard error. Climb: the default set-up of the suite's fast
regime (experiments/real/cpu/r2_warmup_fast_cpu.yaml without warmup: learning rate 5e-4, β 0, 16
steps) on SEEDS seeds per task, each run folder under results/real/cpu/tasks/<task>/seed-<n>/
(kept: a rerun trains only the missing ones); the training reward per step and steps_to_learn.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_core.util import cpu_math  # noqa: E402  (pins the CPU math before torch loads)

cpu_math.pin(cpu_math.DEFAULT)

TASKS = {"add_small": "data/real/add_small.jsonl", "add_2digit": "data/real/add_2digit.jsonl"}
SPEC = ROOT / "experiments" / "real" / "cpu" / "r2_warmup_fast_cpu.yaml"
OUT = Path("results/real/cpu")
HELD_OUT = 64  # held-out prompts for the baseline (all of them where the task has fewer)
SEEDS = (0, 1, 2)


def base_config(dataset: str, **overrides):
    from grpo_core.config.loading import config_from_dict
    from grpo_core.util.yaml_files import read_yaml_mapping

    base = dict(read_yaml_mapping(SPEC)["base"])
    base.update(dataset=dataset, warmup_ratio=0.0, **overrides)
    return config_from_dict(base, source=f"{SPEC} (base)")


def held_out_baseline(dataset: str) -> dict:
    import torch

    from grpo_core.trainer import GRPOTrainer

    trainer = GRPOTrainer(base_config(dataset))
    rows = trainer.eval_set[:HELD_OUT]
    per_prompt = trainer._mean_rewards(rows, trainer.cfg.num_generations, False, torch.Generator().manual_seed(0))
    n = len(per_prompt)
    mean = sum(per_prompt) / n
    se = statistics.stdev(per_prompt) / math.sqrt(n)
    return {
        "rows": len(trainer.train_set) + len(trainer.eval_set),
        "held_out": len(trainer.eval_set),
        "prompts": n,
        "samples": n * trainer.cfg.num_generations,
        "mean": mean,
        "se": se,
        "all_same": sum(p in (0.0, 1.0) for p in per_prompt) / n,
    }


def climb(task: str, dataset: str) -> list[dict]:
    from grpo_core.run import read_metrics, run_training

    runs = []
    for seed in SEEDS:
        folder = OUT / "tasks" / task / f"seed-{seed}"
        summary_path = folder / "summary.json"
        if not (summary_path.is_file() and json.loads(summary_path.read_text()).get("status") == "finished"):
            if folder.exists():  # a killed run: kept beside, never overwritten
                folder.rename(folder.with_name(f"{folder.name}.unfinished-{len(list(folder.parent.iterdir()))}"))
            run_training(base_config(dataset, seed=seed), folder, progress=False)
        runs.append(
            {
                "summary": json.loads(summary_path.read_text()),
                "rewards": [m["reward"] for m in read_metrics(folder / "metrics.jsonl")],
            }
        )
    return runs


def main() -> int:
    lines = [
        "# The real-model CPU tasks: untrained baseline and climb",
        "",
        f"Written by `python scripts/real_task_baselines.py` (SmolLM2-135M-Instruct, {cpu_math.describe(cpu_math.DEFAULT)}, "
        "one thread). Baseline: the untrained model on the task's held-out rows, 8 samples each, "
        "mean over prompts ± SE; *all-same*: the share of those prompts whose 8 rewards were all equal "
        "(a group with no signal). Climb: the suite's default fast set-up (learning rate 5e-4, β 0, no "
        f"warmup, 4 prompts × 8 completions, 16 steps) on seeds {', '.join(map(str, SEEDS))}; "
        "steps_to_learn against the run's own baseline (training prompts, stl_delta 0.15, window 4).",
        "",
        "| task | rows (held out) | baseline on held-out ± SE | all-same groups | steps_to_learn per seed | "
        "training reward, steps 1-4 → 13-16 (mean over seeds) |",
        "|---|---|---|---|---|---|",
    ]
    for task, dataset in TASKS.items():
        b = held_out_baseline(dataset)
        runs = climb(task, dataset)
        stl = ", ".join(
            "not learned" if r["summary"].get("steps_to_learn") is None else str(r["summary"]["steps_to_learn"])
            for r in runs
        )
        first = statistics.mean(x for r in runs for x in r["rewards"][:4])
        last = statistics.mean(x for r in runs for x in r["rewards"][-4:])
        lines.append(
            f"| `{dataset}` | {b['rows']} ({b['held_out']}) | {b['mean']:.3f} ± {b['se']:.3f} "
            f"({b['prompts']} prompts × 8) | {b['all_same']:.0%} | {stl} | {first:.2f} → {last:.2f} |"
        )
        print(lines[-1], flush=True)
    (OUT / "tasks.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT / 'tasks.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
