"""Pick C5's task where completion lengths can move: for each candidate prompt style, how often the
untrained SmolLM2-135M-Instruct answers right (last_number), how long its completions are and how
many are cut at the cap. No training; prints a table (a pilot's figures, for the C5 spec's notes).

    .venv/bin/grpo fetch-model
    .venv/bin/python scripts/probe_length_tasks.py --cap 96 --prompts 16

The sampler is the trainer's (the pilot spec's config: temperature 1, the chat template, 8
completions per prompt); prompts are drawn from each candidate's held-out part, as the baseline's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_core.util import cpu_math  # noqa: E402  (pins the CPU math before torch loads)

cpu_math.pin(cpu_math.DEFAULT)

PILOT = ROOT / "experiments" / "real" / "cpu" / "pilots" / "c5_lengths_pilot.yaml"


def _pairs(lo: int, hi: int, k: int, seed: int, n: int = 400) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    return [tuple(rng.randint(lo, hi) for _ in range(k)) for _ in range(n)]


CANDIDATES = {  # name: (prompt template, operand tuples)
    "add3_working": (
        "What is {0} + {1} + {2}? Show your working: add the first two numbers, then add the third, "
        "and end with the total as the last number.",
        _pairs(1, 20, 3, 1),
    ),
    "add2_working": (
        "What is {0} + {1}? Show your working in a sentence, and end with the total as the last number.",
        _pairs(1, 20, 2, 2),
    ),
    "add2_short": (
        "What is {0} + {1}? Show your working in one short sentence, and end with the total as the last number.",
        _pairs(1, 20, 2, 2),
    ),
    "add3_working_small": (
        "What is {0} + {1} + {2}? Show your working: add the first two numbers, then add the "
        "third, and end with the total as the last number.",
        _pairs(1, 9, 3, 6),
    ),
    "add2digit_working": (
        "What is {0} + {1}? Show your working: add the tens, then the ones, and end with the total as the last number.",
        _pairs(10, 49, 2, 7),
    ),
    "add2_explain": ("What is {0} + {1}? Explain how you add them, then give the total.", _pairs(1, 20, 2, 3)),
    "add3_small": ("What is {0} + {1} + {2}? Explain how you add them, then give the total.", _pairs(1, 9, 3, 4)),
    "add2_plain": ("What is {0} + {1}?", _pairs(1, 20, 2, 5)),
}


def probe(name: str, cap: int, prompts: int) -> dict:
    import torch

    from grpo_core.config.loading import config_from_dict
    from grpo_core.trainer import GRPOTrainer
    from grpo_core.util.yaml_files import read_yaml_mapping

    template, operands = CANDIDATES[name]
    rows = [{"prompt": template.format(*ops), "answer": str(sum(ops))} for ops in operands]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / f"{name}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        base = dict(read_yaml_mapping(PILOT)["base"])
        base.update(dataset=str(data), max_completion_length=cap, model=str(ROOT / base["model"]))
        trainer = GRPOTrainer(config_from_dict(base, source=f"{PILOT} (base)"))
        part = trainer.eval_set[:prompts]
        G = trainer.cfg.num_generations
        expanded = {k: [v for v in vals for _ in range(G)] for k, vals in part.items()}
        ids, mask = trainer._encode(expanded["prompt"])
        completion_ids, completion_mask = trainer._sample(ids, mask, torch.Generator().manual_seed(0), group_size=G)
        texts = trainer._decode(completion_ids)
        rewards = trainer._score(expanded, texts)["last_number"]
        lengths = completion_mask.sum(dim=1).tolist()
        ended = (completion_ids == trainer.eos_id).any(dim=1).tolist()
        trainer.close()
    right = [n for n, r, e in zip(lengths, rewards, ended) if r > 0 and e]
    groups = [rewards[i : i + G] for i in range(0, len(rewards), G)]
    return {
        "task": name,
        "accuracy": sum(rewards) / len(rewards),
        "mean_length": statistics.mean(lengths),
        "truncated": 1 - sum(ended) / len(ended),
        "right_lengths": f"{min(right)}-{max(right)} (median {statistics.median(right):g})" if right else "-",
        "mixed_groups": sum(0 < sum(g) < G for g in groups) / len(groups),
        "example": texts[0][:160],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cap", type=int, default=96)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tasks", nargs="*", default=list(CANDIDATES))
    args = parser.parse_args()
    print("| task | accuracy | mean length | truncated | right answers' lengths | groups with signal |")
    print("|---|---|---|---|---|---|")
    for name in args.tasks:
        r = probe(name, args.cap, args.prompts)
        print(
            f"| {r['task']} | {r['accuracy']:.3f} | {r['mean_length']:.1f} | {r['truncated']:.2f} | "
            f"{r['right_lengths']} | {r['mixed_groups']:.2f} |",
            flush=True,
        )
        print(f"<!-- {r['task']}: {json.dumps(r['example'])} -->", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
