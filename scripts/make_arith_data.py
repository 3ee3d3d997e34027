"""Write data/arith_word_problems.jsonl: arithmetic word problems with numeric answers
(fixed seed, so the file is reproducible). Columns: prompt, answer, op.

    .venv/bin/python scripts/make_arith_data.py
"""

import json
import random
from pathlib import Path

NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo"]
THINGS = ["apples", "books", "coins", "marbles", "stickers", "pencils", "cards", "shells"]
INSTRUCTION = "Think step by step inside <think> </think>, then give only the final number inside <answer> </answer>."


def problem(rng: random.Random) -> dict:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(2, 60), rng.randint(2, 40)
    op = rng.choice(["add", "sub", "mul"])
    if op == "add":
        text, answer = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?", a + b
    elif op == "sub":
        a, b = max(a, b), min(a, b)
        text, answer = f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?", a - b
    else:
        a, b = rng.randint(2, 12), rng.randint(2, 9)
        text, answer = f"{name} has {a} bags with {b} {thing} in each. How many {thing} is that in total?", a * b
    return {"prompt": f"{text} {INSTRUCTION}", "answer": str(answer), "op": op}


def main() -> None:
    rng = random.Random(2026)
    rows = [problem(rng) for _ in range(1000)]
    out = Path(__file__).resolve().parents[1] / "data" / "arith_word_problems.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()
