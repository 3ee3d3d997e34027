"""The untrained baseline of a base model (no chat template) per task and prompt format: which
format and task give a baseline reward with room to learn (at least 0.05, at most 0.4).

    .venv/bin/grpo fetch-model gemma3-270m
    .venv/bin/python scripts/base_model_pilot.py --out results/real/cpu/pilots/gemma3_prompt_pilot.md

A format puts SHOTS worked examples, the first rows of the task's training part, before the
question (`prompt_template`, which each run's config records):
- `qa`: "Q: <question>\\nA: <answer>\\n\\n" per example, then "Q: {prompt}\\nA:".
- `qa_eos`: the same with each answer closed by the tokenizer's end-of-sequence token (and one
  newline), so that a model which copies the examples' form ends its reply after the number; under
  `qa` a base model goes on to write the next question, and last_number reads that one's number.
The baseline is the trainer's own (the sampler at temperature 1, NUM_GENERATIONS completions of at
most MAX_TOKENS tokens, last_number) on the first HELD_OUT rows of the task's held-out part; with
it, the share of completions that ended before the cap and the share whose first number is right.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_core.util import cpu_math  # noqa: E402  (pins the CPU math before torch loads)

cpu_math.pin(cpu_math.DEFAULT)

TASKS = ("add_small", "add_1digit", "count_on", "successor")
FORMATS = ("qa", "qa_eos")
SHOTS = 8
HELD_OUT = 24
NUM_GENERATIONS = 8
MAX_TOKENS = 16


def template(rows: list[dict], style: str, eos: str) -> str:
    close = f"{eos}\n" if style == "qa_eos" else "\n\n"
    return "".join(f"Q: {r['prompt']}\nA: {r['answer']}{close}" for r in rows) + "Q: {prompt}\nA:"


def config(model: str, task: str, prompt_template: str):
    from grpo_core.config.loading import config_from_dict

    return config_from_dict(
        dict(
            model=model,
            dataset=f"data/real/{task}.jsonl",
            reward_funcs=["last_number"],
            use_peft=True,
            num_generations=NUM_GENERATIONS,
            max_completion_length=MAX_TOKENS,
            prompt_template=prompt_template,
            num_threads=1,
            max_steps=1,
        )
    )


def measure(model: str, task: str, style: str) -> dict:
    import torch

    from grpo_core.tasks.rewards import combine_rewards
    from grpo_core.trainer import GRPOTrainer

    trainer = GRPOTrainer(config(model, task, ""))
    shots = [trainer.train_set[i] for i in range(SHOTS)]
    eos = trainer.tokenizer.eos_token
    trainer.close()
    trainer = GRPOTrainer(config(model, task, template(shots, style, eos)))
    rows = trainer.eval_set[:HELD_OUT]
    started = time.perf_counter()
    expanded = {k: [v for v in vals for _ in range(NUM_GENERATIONS)] for k, vals in rows.items()}
    texts, rewards, ended = [], [], 0
    gen = torch.Generator().manual_seed(0)
    chunk = 4 * NUM_GENERATIONS  # 4 prompts per sampling call, as a training step samples
    for start in range(0, len(expanded["prompt"]), chunk):  # the trainer's _mean_rewards, keeping the texts
        part = {k: v[start : start + chunk] for k, v in expanded.items()}
        ids, mask = trainer._encode(part["prompt"])
        completion_ids, completion_mask = trainer._sample(ids, mask, gen, greedy=False, group_size=NUM_GENERATIONS)
        decoded = trainer._decode(completion_ids)
        texts += decoded
        rewards += combine_rewards(trainer._score(part, decoded), trainer.cfg.reward_weights)
        ended += int((completion_mask.sum(1) < MAX_TOKENS).sum())
    per_prompt = [statistics.fmean(rewards[i : i + NUM_GENERATIONS]) for i in range(0, len(rewards), NUM_GENERATIONS)]
    trainer.close()
    first = [(re.findall(r"-?\d+", text) or [None])[0] == answer for text, answer in zip(texts, expanded["answer"])]
    n = len(per_prompt)
    return {
        "task": task,
        "format": style,
        "baseline": statistics.fmean(per_prompt),
        "se": statistics.stdev(per_prompt) / math.sqrt(n),
        "first_number_right": sum(first) / max(1, len(first)),
        "ended": ended / max(1, len(texts)),
        "prompts": n,
        "seconds": time.perf_counter() - started,
        "example": texts[0] if texts else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="results/local/models/gemma-3-270m")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--out", help="write the table here (markdown)")
    args = parser.parse_args()
    lines = [
        f"| task | format | baseline (last_number) ± se | first number right | ended before {MAX_TOKENS} tokens "
        "| a completion |",
        "|---|---|---|---|---|---|",
    ]
    for task in args.tasks:
        for style in args.formats:
            r = measure(args.model, task, style)
            lines.append(
                f"| {task} | {style} | {r['baseline']:.3f} ± {r['se']:.3f} | {r['first_number_right']:.2f} "
                f"| {r['ended']:.2f} | {json.dumps(r['example'])} |"
            )
            print(lines[-1], f"({r['prompts']} prompts, {r['seconds']:.0f} s)", flush=True)
    if args.out:
        Path(args.out).write_text(
            f"# Base-model prompt pilot: {args.model}\n\nCommand: `.venv/bin/python scripts/base_model_pilot.py "
            + " ".join(sys.argv[1:])
            + f"`, {time.strftime('%Y-%m-%d')}. {SHOTS} worked examples, {HELD_OUT} held-out prompts × "
            f"{NUM_GENERATIONS} completions of at most {MAX_TOKENS} tokens, temperature 1.\n\n"
            + "\n".join(lines)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
