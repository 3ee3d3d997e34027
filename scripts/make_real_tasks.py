"""Write the real-model CPU tasks, data/real/*.jsonl: short-answer arithmetic that
SmolLM2-135M-Instruct answers right 10-50% of the time untrained and learns on a CPU.
Fixed seeds, so the files are reproducible byte for byte. Columns: prompt, answer.

    .venv/bin/python scripts/make_real_tasks.py

- add_small.jsonl: "What is A + B? Reply with only the number.", every pair A, B in 1..20
  (400 rows). Most of the climb is the reply's form: untrained, the model often writes a sentence.
- add_2digit.jsonl: the same question with A, B in 10..99 (2,000 rows, no pair twice): the form,
  then the sums themselves (carries), so the climb is slower and stops lower.
- add2_working.jsonl: "What is A + B? Show your working in a sentence, and end with the total as the
  last number.", every pair A, B in 1..20 (400 rows): the untrained model writes 46 tokens on average
  (right answers 11-65), so completion lengths can move (C5's length question; its reward is
  last_number). Chosen by scripts/probe_length_tasks.py among five prompt styles: three numbers to
  add with the working asked for, the first choice, was answered right 0 times in 96 at a 96-token
  cap (experiments/real/cpu/pilots/c5_lengths_pilot.yaml's notes).

- Easier tasks for a base model that cannot yet add numbers to 20 (Gemma 3 270M: 0-2% right on
  add_small, scripts/base_model_pilot.py), each under the same reply instruction:
  add_1digit.jsonl ("What is A + B?", every pair A, B in 0..9, 100 rows); successor.jsonl
  ("What number comes after N?", N in 1..300, 300 rows); count_on.jsonl ("Start at N and count on
  K. Where do you end?", N in 1..30, K in 1..5, 150 rows).

`grpo` holds out a fixed 10% of each file (grpo_core/tasks.dataset_task); each task's untrained
baseline on that held-out part is measured by `scripts/real_task_baselines.py`.
"""

import json
import random
from pathlib import Path

INSTRUCTION = "Reply with only the number."
OUT = Path(__file__).resolve().parents[1] / "data" / "real"


def question(a: int, b: int) -> dict:
    return {"prompt": f"What is {a} + {b}? {INSTRUCTION}", "answer": str(a + b)}


def add_small() -> list[dict]:
    pairs = [(a, b) for a in range(1, 21) for b in range(1, 21)]
    random.Random(34).shuffle(pairs)
    return [question(a, b) for a, b in pairs]


def add_2digit(n: int = 2000) -> list[dict]:
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    return [question(a, b) for a, b in random.Random(3402).sample(pairs, n)]


WORKING = "Show your working in a sentence, and end with the total as the last number."


def add2_working() -> list[dict]:
    pairs = [(a, b) for a in range(1, 21) for b in range(1, 21)]
    random.Random(35).shuffle(pairs)
    return [{"prompt": f"What is {a} + {b}? {WORKING}", "answer": str(a + b)} for a, b in pairs]


def add_1digit() -> list[dict]:
    pairs = [(a, b) for a in range(10) for b in range(10)]
    random.Random(36).shuffle(pairs)
    return [question(a, b) for a, b in pairs]


def successor() -> list[dict]:
    numbers = list(range(1, 301))
    random.Random(37).shuffle(numbers)
    return [{"prompt": f"What number comes after {n}? {INSTRUCTION}", "answer": str(n + 1)} for n in numbers]


def count_on() -> list[dict]:
    pairs = [(n, k) for n in range(1, 31) for k in range(1, 6)]
    random.Random(38).shuffle(pairs)
    return [
        {"prompt": f"Start at {n} and count on {k}. Where do you end? {INSTRUCTION}", "answer": str(n + k)}
        for n, k in pairs
    ]


TASKS = {
    "add_small": add_small,
    "add_2digit": add_2digit,
    "add2_working": add2_working,
    "add_1digit": add_1digit,
    "successor": successor,
    "count_on": count_on,
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, make in TASKS.items():
        rows = make()
        path = OUT / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
